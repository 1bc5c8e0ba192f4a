package auth

import (
	"crypto/tls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pulsequeue/pulse/pkg/server/config"
)

// The variables ServerTLS's arguments come from; its errors name them.
const (
	TLSCertVar = "PULSE_TLS_CERT"
	TLSKeyVar  = "PULSE_TLS_KEY"
)

// ServerTLS loads the server's certificate and key (PEM files). Both empty
// is plaintext, for local development, and returns nil; exactly one set is
// half a keypair and an error, so a typo never silently drops TLS.
func ServerTLS(certFile, keyFile string) (*tls.Config, error) {
	switch {
	case certFile == "" && keyFile == "":
		return nil, nil
	case keyFile == "":
		return nil, config.Invalid(TLSKeyVar, "is not set but %s is: half a keypair; set both or neither", TLSCertVar)
	case certFile == "":
		return nil, config.Invalid(TLSCertVar, "is not set but %s is: half a keypair; set both or neither", TLSKeyVar)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, config.Invalid(TLSCertVar, "load keypair %s + %s (%s): %v", certFile, keyFile, TLSKeyVar, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// GRPCServerOptions returns the option that serves gRPC over cfg, or none
// for a nil cfg (plaintext).
func GRPCServerOptions(cfg *tls.Config) []grpc.ServerOption {
	if cfg == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}
}
