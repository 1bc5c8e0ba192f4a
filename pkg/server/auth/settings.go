package auth

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/pulsequeue/pulse/pkg/server/config"
)

// The variables Settings reads besides UsersVar, TokensVar, TLSCertVar and
// TLSKeyVar; its errors name them.
const (
	// ModeVar chooses whether credentials are required (ModeRequired, the
	// default) or the service runs open (ModeNone).
	ModeVar = "PULSE_AUTH"
	// AllowPlaintextCredentialsVar, set true, lets users and tokens travel
	// over a plaintext listener bound to a non-loopback address.
	AllowPlaintextCredentialsVar = "PULSE_ALLOW_PLAINTEXT_CREDENTIALS"
)

// Mode is the value of PULSE_AUTH.
type Mode string

// The modes.
const (
	// ModeRequired refuses to start without credentials (users, tokens or
	// certificate identities) and authenticates every call.
	ModeRequired Mode = "required"
	// ModeNone runs open: every caller is Anonymous, an operator. For
	// local development and tests only; the service warns at start.
	ModeNone Mode = "none"
	// ModeDefault is what an unset PULSE_AUTH means.
	ModeDefault = ModeRequired
)

// ParseMode accepts the values of PULSE_AUTH; empty is ModeDefault.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return ModeDefault, nil
	case ModeRequired, ModeNone:
		return m, nil
	}
	return "", config.Invalid(ModeVar, "%q is not %s or %s", s, ModeRequired, ModeNone)
}

// Settings are the security variables of a service that serves calls
// needing credentials (control-api, dispatch-gateway): one implementation,
// so every such service starts, refuses and warns the same way.
type Settings struct {
	// Mode is PULSE_AUTH: required (empty means the same) or none.
	Mode string
	// Users, Tokens and Certs are PULSE_AUTH_USERS, PULSE_AUTH_TOKENS and
	// PULSE_AUTH_CERTS.
	Users, Tokens, Certs string
	// TLSCert and TLSKey are the server's keypair; TLSClientCA, when set,
	// makes every client present a certificate that CA signed (mTLS).
	TLSCert, TLSKey, TLSClientCA string
	// AllowPlaintextCredentials is PULSE_ALLOW_PLAINTEXT_CREDENTIALS.
	AllowPlaintextCredentials bool
}

// Listener is an address a service serves authenticated calls on, with the
// variable it came from, for the plaintext-credentials check. Plaintext
// marks a listener served without TLS even when the service has a keypair
// (the gateway's admin port, when /metrics needs credentials).
type Listener struct {
	Var, Addr string
	Plaintext bool
}

// Security is what Settings.Load yields: the Authenticator (nil in open
// mode), the server TLS configuration (nil for plaintext), and what the
// service must warn about at start.
type Security struct {
	Authenticator *Authenticator
	TLS           *tls.Config
	warnings      []string
}

// Load parses and checks s for a service listening on listeners. It refuses,
// with an error naming the variable to change:
//
//   - PULSE_AUTH=required (the default) with no users, tokens or
//     certificate identities;
//   - PULSE_AUTH=none with credentials set (which would be ignored);
//   - users or tokens on a plaintext listener bound to anything but a
//     loopback address, unless PULSE_ALLOW_PLAINTEXT_CREDENTIALS=true;
//   - half a keypair, unreadable files, PULSE_TLS_CLIENT_CA without a
//     server keypair, PULSE_AUTH_CERTS without PULSE_TLS_CLIENT_CA.
func (s Settings) Load(listeners ...Listener) (Security, error) {
	mode, err := ParseMode(s.Mode)
	if err != nil {
		return Security{}, err
	}
	users, tokens, certs := strings.TrimSpace(s.Users), strings.TrimSpace(s.Tokens), strings.TrimSpace(s.Certs)
	secrets := users != "" || tokens != ""
	switch {
	case mode == ModeNone && users != "":
		return Security{}, config.Invalid(UsersVar, "is set but %s=%s: remove one (open mode would ignore the credentials)", ModeVar, ModeNone)
	case mode == ModeNone && tokens != "":
		return Security{}, config.Invalid(TokensVar, "is set but %s=%s: remove one (open mode would ignore the credentials)", ModeVar, ModeNone)
	case mode == ModeNone && certs != "":
		return Security{}, config.Invalid(CertsVar, "is set but %s=%s: remove one (open mode would ignore the certificate identities)", ModeVar, ModeNone)
	case mode == ModeRequired && !secrets && certs == "":
		return Security{}, config.Invalid(ModeVar, "is %s (the default) but no credentials are configured: set %s, %s or %s, "+
			"or set %s=%s to run without authentication (local development only)", ModeRequired, UsersVar, TokensVar, CertsVar, ModeVar, ModeNone)
	}

	tlsCfg, err := ServerTLS(s.TLSCert, s.TLSKey)
	if err != nil {
		return Security{}, err
	}
	if err := clientCA(tlsCfg, s.TLSClientCA); err != nil {
		return Security{}, err
	}
	if certs != "" && s.TLSClientCA == "" {
		return Security{}, config.Invalid(CertsVar, "is set but %s is not: certificate identities need client certificates verified against a CA", TLSClientCAVar)
	}

	sec := Security{TLS: tlsCfg}
	if mode == ModeRequired {
		a, err := New(users, tokens)
		if err != nil {
			return Security{}, err
		}
		if sec.Authenticator, err = withCerts(a, certs); err != nil {
			return Security{}, err
		}
	} else {
		sec.warnings = append(sec.warnings, openModeWarning)
	}

	if secrets {
		for _, l := range listeners {
			if loopback(l.Addr) || (tlsCfg != nil && !l.Plaintext) {
				continue
			}
			if !s.AllowPlaintextCredentials {
				return Security{}, config.Invalid(AllowPlaintextCredentialsVar,
					"is not true, and %s=%q listens beyond loopback without TLS: passwords and tokens would cross the network in the clear. "+
						"Set %s and %s, bind %s to 127.0.0.1, or set %s=true on a trusted private network",
					l.Var, l.Addr, TLSCertVar, TLSKeyVar, l.Var, AllowPlaintextCredentialsVar)
			}
			sec.warnings = append(sec.warnings, fmt.Sprintf("CREDENTIALS TRAVEL IN PLAINTEXT: %s=%q listens beyond loopback without TLS and %s=true; "+
				"use this on a trusted private network only, and set %s and %s elsewhere", l.Var, l.Addr, AllowPlaintextCredentialsVar, TLSCertVar, TLSKeyVar))
			break
		}
	}
	return sec, nil
}

// Warn logs, at WARN, whatever Load found the operator should know: open
// mode, credentials in plaintext. Services call it once at start.
func (s Security) Warn(logger *slog.Logger) {
	for _, w := range s.warnings {
		if w == openModeWarning {
			LogOpenMode(logger)
			continue
		}
		logger.Warn(w, "auth", "plaintext")
	}
}

// openModeWarning marks, in Security.warnings, that LogOpenMode is due.
const openModeWarning = "open"

// loopback reports whether addr (host:port) binds only a loopback
// interface. An empty host, 0.0.0.0 and :: bind every interface; a host
// name other than localhost may resolve to anything, so it counts as
// beyond loopback.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
