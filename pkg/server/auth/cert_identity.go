package auth

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/config"
)

// The variables of client-certificate (mTLS) authentication.
const (
	// TLSClientCAVar is a PEM file of the CAs client certificates must
	// chain to. Set, every gRPC connection must present such a certificate
	// (the handshake fails otherwise); HTTP connections may present one.
	TLSClientCAVar = "PULSE_TLS_CLIENT_CA"
	// CertsVar maps certificate names to roles, name:role,...: a verified
	// client certificate whose subject common name is listed is that
	// identity, with that role.
	CertsVar = "PULSE_AUTH_CERTS"
)

// msgUnknownCert answers a verified certificate whose name has no role.
const msgUnknownCert = "client certificate not admitted: its common name is not in " + CertsVar

// clientCA makes cfg verify client certificates against the CAs in file
// (PULSE_TLS_CLIENT_CA): required on every connection, which is what gRPC
// listeners use; HTTPTLS relaxes it for the HTTP listener. An empty file
// leaves cfg as it is.
func clientCA(cfg *tls.Config, file string) error {
	if file == "" {
		return nil
	}
	if cfg == nil {
		return config.Invalid(TLSClientCAVar, "is set but %s and %s are not: client certificates need a TLS listener", TLSCertVar, TLSKeyVar)
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return config.Invalid(TLSClientCAVar, "read %s: %v", file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return config.Invalid(TLSClientCAVar, "%s holds no PEM certificate", file)
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	return nil
}

// HTTPTLS is the TLS configuration for an HTTP listener that also serves
// the probes and /metrics: a client certificate, when PULSE_TLS_CLIENT_CA
// is set, is verified if presented but not demanded, so a kubelet's probe
// still connects; every route but the Public ones still needs credentials
// or an admitted certificate. Nil for plaintext.
func (s Security) HTTPTLS() *tls.Config {
	if s.TLS == nil || s.TLS.ClientAuth != tls.RequireAndVerifyClientCert {
		return s.TLS
	}
	cfg := s.TLS.Clone()
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	return cfg
}

// withCerts adds the certificate identities of spec (PULSE_AUTH_CERTS,
// name:role,...) to a, making an Authenticator if a is nil and spec is
// not empty.
func withCerts(a *Authenticator, spec string) (*Authenticator, error) {
	if strings.TrimSpace(spec) == "" {
		return a, nil
	}
	certs := map[string]Identity{}
	for i, raw := range strings.Split(spec, ",") {
		n := i + 1
		raw = strings.TrimSpace(raw)
		name, roleName, ok := strings.Cut(raw, ":")
		if !ok || raw == "" {
			return nil, config.Invalid(CertsVar, "entry %d is not name:role", n)
		}
		if len(name) > maxNameLen || !nameRE.MatchString(name) {
			return nil, config.Invalid(CertsVar, "entry %d: the name must be 1 to %d letters, digits or . _ @ -", n, maxNameLen)
		}
		role, err := ParseRole(roleName)
		if err != nil {
			return nil, config.Invalid(CertsVar, "entry %d (%s): %v", n, name, err)
		}
		if _, dup := certs[name]; dup {
			return nil, config.Invalid(CertsVar, "entry %d: %s is listed twice", n, name)
		}
		certs[name] = Identity{Name: name, Role: role}
	}
	if a == nil {
		a = &Authenticator{key: make([]byte, 32), users: map[string]*user{}}
		_, _ = rand.Read(a.key) // crypto/rand.Read never fails
		a.SetLimits(Limits{})
	}
	a.certs = certs
	return a, nil
}

// certIdentity is the identity of the verified client certificate of the
// connection ctx belongs to: ok is false when there is none (no mTLS, or
// an HTTP client that presented no certificate), and err is
// Unauthenticated when the certificate's name is not in PULSE_AUTH_CERTS.
func (a *Authenticator) certIdentity(ctx context.Context) (id Identity, ok bool, err error) {
	leaf := verifiedLeaf(ctx)
	if leaf == nil {
		return Identity{}, false, nil
	}
	if id, found := a.certs[leaf.Subject.CommonName]; found {
		return id, true, nil
	}
	return Identity{}, true, apierr.Unauthenticated(msgUnknownCert)
}

// verifiedLeaf is the client certificate the TLS handshake verified, from
// the gRPC peer or the HTTP connection state WithTLSState attached.
func verifiedLeaf(ctx context.Context) *x509.Certificate {
	var state *tls.ConnectionState
	if s, ok := ctx.Value(tlsStateKey{}).(*tls.ConnectionState); ok {
		state = s
	} else if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			state = &info.State
		}
	}
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return nil
	}
	return state.VerifiedChains[0][0]
}

type tlsStateKey struct{}

// withTLSState attaches an HTTP request's connection state (r.TLS) for
// certIdentity; nil (plaintext) attaches nothing.
func withTLSState(ctx context.Context, state *tls.ConnectionState) context.Context {
	if state == nil {
		return ctx
	}
	return context.WithValue(ctx, tlsStateKey{}, state)
}

// admitCert admits a call that sent no Authorization header by the
// connection's verified client certificate (PULSE_AUTH_CERTS): ok is false
// when there is none, leaving the call to admit's missing-credentials
// answer. An unlisted certificate is Unauthenticated and a listed one
// without the role PermissionDenied, each reported to OnRefusal's function.
// A certificate the handshake verified is not a guess, so it does not count
// towards the failed-attempt limits.
func (a *Authenticator) admitCert(ctx context.Context, roles []Role, what string) (_ context.Context, err error, ok bool) {
	id, ok, err := a.certIdentity(ctx)
	if !ok {
		return nil, nil, false
	}
	if err != nil {
		a.refused(RefusalInvalid)
		return nil, err, true
	}
	if !id.Allowed(roles) {
		a.refused(RefusalForbidden)
		return nil, apierr.PermissionDenied("role " + string(id.Role) + " may not call " + what + "; it needs " + describe(roles)), true
	}
	return WithIdentity(ctx, id), nil, true
}
