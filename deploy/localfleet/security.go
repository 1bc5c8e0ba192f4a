package localfleet

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// The development credentials a fleet runs with unless Options.Open is set
// or Options.Env brings credentials of its own: one Basic user per role.
// They are not secrets: the fleet listens on 127.0.0.1 only, and
// docker-compose.yml ships the same ones. `make dev` prints them.
const (
	DevOperatorUser     = "operator"
	DevOperatorPassword = "dev-operator"
	DevProducerUser     = "producer"
	DevProducerPassword = "dev-producer"
	DevWorkerUser       = "worker"
	DevWorkerPassword   = "dev-worker"
)

// DevUsers is PULSE_AUTH_USERS for the development credentials.
const DevUsers = DevOperatorUser + ":operator:" + DevOperatorPassword + "," +
	DevProducerUser + ":producer:" + DevProducerPassword + "," +
	DevWorkerUser + ":worker:" + DevWorkerPassword

// authVars are the variables that configure a service's authentication; a
// fleet whose Options.Env sets any of them gets no defaults of its own.
var authVars = []string{"PULSE_AUTH", "PULSE_AUTH_USERS", "PULSE_AUTH_TOKENS", "PULSE_AUTH_CERTS"}

// authEnv is what the fleet adds to every service's environment for
// authentication: nothing when Options.Env configures it, PULSE_AUTH=none
// when Options.Open, else the development users.
func (o Options) authEnv() map[string]string {
	for k := range o.Env {
		for _, v := range authVars {
			if strings.EqualFold(k, v) {
				return nil
			}
		}
	}
	if o.Open {
		return map[string]string{"PULSE_AUTH": "none"}
	}
	return map[string]string{"PULSE_AUTH_USERS": DevUsers}
}

// DevCredentials reports whether the fleet runs with the development users
// (so its demo processes and printed commands use them).
func (f *Fleet) DevCredentials() bool {
	return f.opts.authEnv()["PULSE_AUTH_USERS"] == DevUsers
}

// readinessClient is the HTTP client of the fleet's readiness checks: it
// trusts opts.CAFile when the services serve TLS.
func readinessClient(opts Options) (*http.Client, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	if opts.Env["PULSE_TLS_CERT"] == "" {
		return c, nil
	}
	if opts.CAFile == "" {
		return nil, errors.New("fleet: Env sets PULSE_TLS_CERT but Options.CAFile is empty: the fleet cannot check the services' readiness over TLS")
	}
	pem, err := os.ReadFile(opts.CAFile)
	if err != nil {
		return nil, fmt.Errorf("fleet: CAFile: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("fleet: CAFile %s holds no PEM certificate", opts.CAFile)
	}
	c.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return c, nil
}
