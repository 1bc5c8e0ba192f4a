// Package config is the dispatch-gateway's configuration: one struct read
// from PULSE_* environment variables once, in main.
package config

import (
	"fmt"
	"os"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/auth"
	"github.com/pulsequeue/pulse/pkg/server/config"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
	"github.com/pulsequeue/pulse/pkg/server/retrypolicy"
)

// Defaults, named so the operations guide and the code say the same thing.
const (
	GRPCAddrDefault          = ":50052"
	AdminAddrDefault         = ":9101"
	LeaseTTLDefault          = 30 * time.Second // a dead worker's jobs wait at most this (plus one sweep)
	HeartbeatIntervalDefault = 10 * time.Second // three beats per TTL: one lost beat never loses a lease
	PollIntervalDefault      = 500 * time.Millisecond
	ClaimBatchDefault        = 500
	// ClaimLanesDefault is how many claim loops a gateway runs (ADR-0064):
	// two, so a busy group's claim never holds up every other group's.
	ClaimLanesDefault = 2
	// MaxClaimLanes is the most PULSE_CLAIM_LANES takes.
	MaxClaimLanes          = 16
	DBMaxConnsDefault      = 10
	ShutdownTimeoutDefault = 20 * time.Second
	// MinLeaseTTL keeps heartbeats from becoming a DoS of their own.
	MinLeaseTTL = time.Second
	// MaxStreamsPerIdentityDefault caps the job streams one authenticated
	// identity holds open on one gateway.
	MaxStreamsPerIdentityDefault = 64
	// MaxStreamsPerIdentityLimit is the largest cap PULSE_MAX_STREAMS_PER_IDENTITY takes.
	MaxStreamsPerIdentityLimit = 100000
)

// Config is every setting the gateway reads.
type Config struct {
	DatabaseURL string `envconfig:"DATABASE_URL" required:"true"`
	GRPCAddr    string `envconfig:"GRPC_ADDR" default:":50052"`
	// GRPCReflection registers gRPC server reflection (operators only when
	// authentication is on).
	GRPCReflection    bool          `envconfig:"GRPC_REFLECTION" default:"true"`
	AdminAddr         string        `envconfig:"ADMIN_ADDR" default:":9101"`
	LogLevel          string        `envconfig:"LOG_LEVEL" default:"info"`
	GatewayID         string        `envconfig:"GATEWAY_ID"`
	LeaseTTL          time.Duration `envconfig:"LEASE_TTL" default:"30s"`
	HeartbeatInterval time.Duration `envconfig:"HEARTBEAT_INTERVAL" default:"10s"`
	PollInterval      time.Duration `envconfig:"POLL_INTERVAL" default:"500ms"`
	// PauseRefreshInterval is the pause gate's reconciling poll behind the
	// pulse_dispatch_control NOTIFY (docs/pause.md).
	PauseRefreshInterval time.Duration `envconfig:"PAUSE_REFRESH_INTERVAL" default:"1s"`
	// PresenceInterval is how often the gateway refreshes worker_presence
	// for all its streams; PresenceTTL is when an unrefreshed row expires
	// (ADR-0012, docs/operations.md).
	PresenceInterval time.Duration `envconfig:"PRESENCE_INTERVAL" default:"10s"`
	PresenceTTL      time.Duration `envconfig:"PRESENCE_TTL" default:"30s"`
	ClaimBatch       int           `envconfig:"CLAIM_BATCH" default:"500"`
	// ClaimCooldown: the rest of the worker groups whose claims found a
	// backlog, so freed slots gather into one claim (dispatch.DispatcherConfig).
	ClaimCooldown time.Duration `envconfig:"CLAIM_COOLDOWN" default:"5ms"`
	// ClaimRescanInterval: how long claims may resume where the last one
	// left off before one starts from the queue's head again (ADR-0022).
	ClaimRescanInterval time.Duration `envconfig:"CLAIM_RESCAN_INTERVAL" default:"100ms"`
	// ClaimLanes: the claim loops, each claiming for its share of the
	// worker groups, one claim in flight per lane (ADR-0064).
	ClaimLanes int `envconfig:"CLAIM_LANES" default:"2"`
	// RetryBackoffUnit and RetryBackoffMax, when set, write the retry
	// policy (the retry_policy row, shared with the reaper and every other
	// gateway) at start; unset, the row is left as it is (ADR-0013).
	RetryBackoffUnit config.OptionalDuration `envconfig:"RETRY_BACKOFF_UNIT"`
	RetryBackoffMax  config.OptionalDuration `envconfig:"RETRY_BACKOFF_MAX"`
	DBMaxConns       int32                   `envconfig:"DB_MAX_CONNS" default:"10"`
	ShutdownTimeout  time.Duration           `envconfig:"SHUTDOWN_TIMEOUT" default:"20s"`
	// Security (auth.Settings): the mode (required unless "none"),
	// credentials (name:role:secret,... and certificate name:role,...), the
	// TLS keypair and client CA, and the plaintext-credentials opt-in.
	Auth           string `envconfig:"AUTH" default:"required"`
	AuthUsers      string `envconfig:"AUTH_USERS"`
	AuthTokens     string `envconfig:"AUTH_TOKENS"`
	AuthCerts      string `envconfig:"AUTH_CERTS"`
	TLSCert        string `envconfig:"TLS_CERT"`
	TLSKey         string `envconfig:"TLS_KEY"`
	TLSClientCA    string `envconfig:"TLS_CLIENT_CA"`
	AllowPlaintext bool   `envconfig:"ALLOW_PLAINTEXT_CREDENTIALS"`
	// MaxStreamsPerIdentity caps the StreamJobs streams one authenticated
	// identity holds open on this gateway; one more is refused with
	// ResourceExhausted. Not applied in open mode.
	MaxStreamsPerIdentity int `envconfig:"MAX_STREAMS_PER_IDENTITY" default:"64"`
	// MetricsMaxTopics and MetricsTopicIdle bound the topic label of the
	// gateway's metrics (pkg/server/metrics); MetricsAuth makes /metrics
	// need credentials of any role.
	MetricsMaxTopics int           `envconfig:"METRICS_MAX_TOPICS" default:"200"`
	MetricsTopicIdle time.Duration `envconfig:"METRICS_TOPIC_IDLE" default:"1h"`
	MetricsAuth      bool          `envconfig:"METRICS_AUTH" default:"false"`
	// MaxResultBytes is the largest result a handler's completion may
	// store (1..pulsetype.MaxResultBytes); a larger one dead-letters the
	// job with an error that says so.
	MaxResultBytes int `envconfig:"MAX_RESULT_BYTES" default:"65536"`
}

// Validate checks ranges and relations, naming the variable at fault.
func (c *Config) Validate() error {
	if c.MaxResultBytes < 1 || c.MaxResultBytes > pulsetype.MaxResultBytes {
		return config.Invalid("PULSE_MAX_RESULT_BYTES", "is %d; it must be between 1 and %d", c.MaxResultBytes, pulsetype.MaxResultBytes)
	}
	switch {
	case c.LeaseTTL < MinLeaseTTL:
		return config.Invalid("PULSE_LEASE_TTL", "is %s; it must be at least %s", c.LeaseTTL, MinLeaseTTL)
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval > c.LeaseTTL/2:
		return config.Invalid("PULSE_HEARTBEAT_INTERVAL", "is %s; it must be positive and at most half of PULSE_LEASE_TTL (%s) so one lost beat never loses a lease", c.HeartbeatInterval, c.LeaseTTL)
	case c.PollInterval < 10*time.Millisecond || c.PollInterval > time.Minute:
		return config.Invalid("PULSE_POLL_INTERVAL", "is %s; it must be between 10ms and 1m", c.PollInterval)
	case c.PauseRefreshInterval < 10*time.Millisecond || c.PauseRefreshInterval > time.Minute:
		return config.Invalid("PULSE_PAUSE_REFRESH_INTERVAL", "is %s; it must be between 10ms and 1m", c.PauseRefreshInterval)
	case c.PresenceInterval < 10*time.Millisecond || c.PresenceInterval > 5*time.Minute:
		return config.Invalid("PULSE_PRESENCE_INTERVAL", "is %s; it must be between 10ms and 5m", c.PresenceInterval)
	case c.PresenceTTL < 2*c.PresenceInterval || c.PresenceTTL > time.Hour:
		return config.Invalid("PULSE_PRESENCE_TTL", "is %s; it must be at least twice PULSE_PRESENCE_INTERVAL (%s), so one failed refresh never expires a connected worker, and at most 1h", c.PresenceTTL, c.PresenceInterval)
	case c.ClaimBatch < 1 || c.ClaimBatch > 10000:
		return config.Invalid("PULSE_CLAIM_BATCH", "is %d; it must be between 1 and 10000", c.ClaimBatch)
	case c.ClaimCooldown < 0 || c.ClaimCooldown > time.Second:
		return config.Invalid("PULSE_CLAIM_COOLDOWN", "is %s; it must be between 0 and 1s", c.ClaimCooldown)
	case c.ClaimRescanInterval < 0 || c.ClaimRescanInterval > time.Minute:
		return config.Invalid("PULSE_CLAIM_RESCAN_INTERVAL", "is %s; it must be between 0 (every claim from the head) and 1m", c.ClaimRescanInterval)
	case c.ClaimLanes < 1 || c.ClaimLanes > MaxClaimLanes:
		return config.Invalid("PULSE_CLAIM_LANES", "is %d; it must be between 1 and %d", c.ClaimLanes, MaxClaimLanes)
	case c.DBMaxConns < 2:
		return config.Invalid("PULSE_DB_MAX_CONNS", "is %d; the gateway needs at least 2 (claims plus reports)", c.DBMaxConns)
	case int(c.DBMaxConns) <= c.ClaimLanes:
		return config.Invalid("PULSE_DB_MAX_CONNS", "is %d; it must be more than PULSE_CLAIM_LANES (%d): every lane may hold a connection for its claim, and reports need one beside them", c.DBMaxConns, c.ClaimLanes)
	case c.ShutdownTimeout <= 0:
		return config.Invalid("PULSE_SHUTDOWN_TIMEOUT", "is %s; it must be positive", c.ShutdownTimeout)
	}
	if err := retrypolicy.Validate(c.RetryBackoffUnit, c.RetryBackoffMax); err != nil {
		return err
	}
	if c.MaxStreamsPerIdentity < 1 || c.MaxStreamsPerIdentity > MaxStreamsPerIdentityLimit {
		return config.Invalid("PULSE_MAX_STREAMS_PER_IDENTITY", "is %d; it must be between 1 and %d", c.MaxStreamsPerIdentity, MaxStreamsPerIdentityLimit)
	}
	if err := metrics.ValidateTopicBounds(c.MetricsMaxTopics, c.MetricsTopicIdle); err != nil {
		return err
	}
	sec, err := c.Security()
	if err != nil {
		return err
	}
	if c.MetricsAuth && sec.Authenticator == nil {
		return config.Invalid("PULSE_METRICS_AUTH", "is true but authentication is off (PULSE_AUTH=none)")
	}
	if c.GatewayID == "" {
		host, _ := os.Hostname()
		c.GatewayID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	// The gateway id is its writer in job_throughput, which every report
	// statement adds to: a name the table refuses would fail them all.
	if err := jobstore.ValidWriter(c.GatewayID); err != nil {
		return config.Invalid("PULSE_GATEWAY_ID", "%v", err)
	}
	return nil
}

// Security parses the credentials and loads the TLS files (auth.Settings):
// a nil Authenticator is open mode (PULSE_AUTH=none) and a nil tls.Config
// plaintext. Errors name the variable.
func (c *Config) Security() (auth.Security, error) {
	return auth.Settings{
		Mode: c.Auth, Users: c.AuthUsers, Tokens: c.AuthTokens, Certs: c.AuthCerts,
		TLSCert: c.TLSCert, TLSKey: c.TLSKey, TLSClientCA: c.TLSClientCA,
		AllowPlaintextCredentials: c.AllowPlaintext,
	}.Load(c.credentialListeners()...)
}

// credentialListeners are the listeners credentials reach: gRPC, and the
// admin port (always plaintext) when /metrics needs them.
func (c *Config) credentialListeners() []auth.Listener {
	ls := []auth.Listener{{Var: "PULSE_GRPC_ADDR", Addr: c.GRPCAddr}}
	if c.MetricsAuth {
		ls = append(ls, auth.Listener{Var: "PULSE_ADMIN_ADDR", Addr: c.AdminAddr, Plaintext: true})
	}
	return ls
}
