package pulse

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// ErrPlaintextCredentials is what [NewClient] and [NewWorker] return when
// credentials ([WithUserPass], [WithPerRPCCredentials]) would be sent over a
// plaintext connection to an address that is not loopback: anyone on the
// network could read them. Configure TLS ([WithTLS], [WithTLSFiles]), or
// call [AllowPlaintextCredentials] on a network you trust. The services
// refuse the same configuration on their side (PULSE_ALLOW_PLAINTEXT_CREDENTIALS).
var ErrPlaintextCredentials = errors.New("pulse: refusing to send credentials over plaintext to an address that is not loopback")

// WithTLS connects over TLS configured by cfg: the roots to trust
// (RootCAs; nil is the system's), a client certificate for services that
// require one (Certificates or GetClientCertificate), the server name
// (default: the target's host). A nil cfg is the system's roots and no
// client certificate. The SDK copies cfg.
func WithTLS(cfg *tls.Config) ConnOption {
	return connOption(func(c *connConfig) {
		if cfg == nil {
			c.tls = &tls.Config{MinVersion: tls.VersionTLS12}
			return
		}
		c.tls = cfg.Clone()
		if c.tls.MinVersion == 0 {
			c.tls.MinVersion = tls.VersionTLS12
		}
	})
}

// WithTLSFiles connects over TLS trusting the CA certificates in caFile (a
// PEM bundle; empty trusts the system's roots) and, when certFile and
// keyFile are set, presenting that client certificate (PEM files; both or
// neither), which services with PULSE_TLS_CLIENT_CA require and may take
// as the caller's identity. A file that cannot be read or parsed makes
// [NewClient] or [NewWorker] fail, naming it.
func WithTLSFiles(caFile, certFile, keyFile string) ConnOption {
	return connOption(func(c *connConfig) {
		cfg, err := tlsFromFiles(caFile, certFile, keyFile)
		if err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.tls = cfg
	})
}

// AllowPlaintextCredentials lets credentials be sent over a plaintext
// connection to an address that is not loopback, which [NewClient] and
// [NewWorker] otherwise refuse with [ErrPlaintextCredentials]. Use it only on
// a network you trust (a private compose or cluster network), where a
// service runs with PULSE_ALLOW_PLAINTEXT_CREDENTIALS=true.
func AllowPlaintextCredentials() ConnOption {
	return connOption(func(c *connConfig) { c.allowPlaintextCredentials = true })
}

func tlsFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("pulse: TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("pulse: TLS CA file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "" || keyFile == "":
		return nil, fmt.Errorf("pulse: TLS client certificate: set both the certificate file and the key file, or neither (got %q and %q)", certFile, keyFile)
	default:
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("pulse: TLS client certificate %s + %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// check reports an option's error, or ErrPlaintextCredentials when
// credentials would cross a plaintext connection to one of targets that is
// not loopback.
func (c *connConfig) check(targets ...string) error {
	if err := errors.Join(c.errs...); err != nil {
		return err
	}
	if !c.credentials || c.tls != nil || c.allowPlaintextCredentials {
		return nil
	}
	for _, t := range targets {
		if !loopbackTarget(t) {
			return fmt.Errorf("%w: %q; use WithTLS or WithTLSFiles, or AllowPlaintextCredentials on a trusted network", ErrPlaintextCredentials, t)
		}
	}
	return nil
}

// loopbackTarget reports whether a gRPC target names only this machine:
// a Unix socket, localhost, or loopback IPs, with or without the dns:,
// passthrough:, ipv4: or ipv6: scheme. A target it cannot read is not
// loopback.
func loopbackTarget(target string) bool {
	endpoints := target
	if scheme, rest, ok := strings.Cut(target, ":"); ok {
		switch strings.ToLower(scheme) {
		case "unix", "unix-abstract":
			return true
		case "dns", "passthrough":
			endpoints = stripAuthority(rest)
		case "ipv4", "ipv6":
			endpoints = rest
		}
	}
	for _, ep := range strings.Split(endpoints, ",") {
		if !loopbackHost(ep) {
			return false
		}
	}
	return true
}

// stripAuthority turns "//authority/host:port" or "///host:port" into
// "host:port", and leaves "host:port" as it is.
func stripAuthority(s string) string {
	if rest, ok := strings.CutPrefix(s, "//"); ok {
		if _, ep, found := strings.Cut(rest, "/"); found {
			return ep
		}
		return ""
	}
	return s
}

func loopbackHost(endpoint string) bool {
	host := endpoint
	if h, port, err := net.SplitHostPort(endpoint); err == nil {
		if strings.Trim(port, "0123456789") != "" {
			return false
		}
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
