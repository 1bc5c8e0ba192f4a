package app

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// The environment variables of the TLS flags, and of the plaintext opt-in
// (the name the services use for theirs).
const (
	envCAFile         = "PULSE_CA_FILE"
	envClientCert     = "PULSE_CLIENT_CERT"
	envClientKey      = "PULSE_CLIENT_KEY"
	envAllowPlaintext = "PULSE_ALLOW_PLAINTEXT_CREDENTIALS"
)

// httpTimeout bounds one request of the CLI.
const httpTimeout = 60 * time.Second

// tlsSettings are the TLS flags, each taken from the flag, else the
// environment.
type tlsSettings struct {
	caFile, certFile, keyFile string
	allowPlaintext            bool
}

func (e *env) tlsSettings() tlsSettings {
	s := tlsSettings{caFile: e.caFile, certFile: e.clientCert, keyFile: e.clientKey, allowPlaintext: e.allowPlaintext}
	if s.caFile == "" {
		s.caFile = os.Getenv(envCAFile)
	}
	if s.certFile == "" && s.keyFile == "" {
		s.certFile, s.keyFile = os.Getenv(envClientCert), os.Getenv(envClientKey)
	}
	if !s.allowPlaintext {
		s.allowPlaintext = os.Getenv(envAllowPlaintext) == "true"
	}
	return s
}

// httpClient is the client for server: with a CA bundle and a client
// certificate when the TLS settings name them. It refuses, before any
// request, to send credentials over plain http to a host that is not
// loopback, unless --allow-plaintext-credentials says the network is
// trusted.
func (s tlsSettings) httpClient(server string, credentials bool) (*http.Client, error) {
	if credentials && !s.allowPlaintext {
		if u, err := url.Parse(server); err == nil && u.Scheme == "http" && !loopbackHost(u.Hostname()) {
			return nil, usageErrorf("refusing to send credentials over plain http to %s: use an https:// server (--ca-file for a private CA), "+
				"or --allow-plaintext-credentials (env %s=true) on a trusted network", u.Host, envAllowPlaintext)
		}
	}
	if s.caFile == "" && s.certFile == "" && s.keyFile == "" {
		return &http.Client{Timeout: httpTimeout}, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.caFile != "" {
		pem, err := os.ReadFile(s.caFile)
		if err != nil {
			return nil, usageErrorf("--ca-file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageErrorf("--ca-file %s holds no PEM certificate", s.caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case s.certFile == "" && s.keyFile == "":
	case s.certFile == "" || s.keyFile == "":
		return nil, usageErrorf("--client-cert and --client-key go together (env %s, %s)", envClientCert, envClientKey)
	default:
		pair, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
		if err != nil {
			return nil, usageErrorf("--client-cert %s / --client-key %s: %v", s.certFile, s.keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = cfg
	return &http.Client{Timeout: httpTimeout, Transport: transport}, nil
}

// loopbackHost reports whether host (no port) is this machine.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
