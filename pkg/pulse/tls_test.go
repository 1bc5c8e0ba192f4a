package pulse

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoopbackTarget(t *testing.T) {
	t.Parallel()
	for target, want := range map[string]bool{
		"localhost:50051":                    true,
		"LOCALHOST:1":                        true,
		"127.0.0.1:50051":                    true,
		"127.8.9.10:1":                       true,
		"[::1]:50052":                        true,
		"dns:///localhost:50051":             true,
		"dns://8.8.8.8/localhost:50051":      true,
		"passthrough:///127.0.0.1:1":         true,
		"ipv4:127.0.0.1:1,127.0.0.2:2":       true,
		"ipv6:[::1]:1":                       true,
		"unix:///tmp/pulse.sock":             true,
		"unix-abstract:pulse":                true,
		"localhost":                          true,
		"control-api:50051":                  false,
		"dns:///dispatch-gateway:50052":      false,
		"dns://127.0.0.1/pulse.example:1":    false, // the resolver is local, the target is not
		"10.0.0.1:50051":                     false,
		"0.0.0.0:50051":                      false,
		"[::]:1":                             false,
		"ipv4:127.0.0.1:1,10.0.0.1:1":        false,
		"localhost.evil.example:1":           false,
		"127.0.0.1.nip.io:1":                 false,
		"passthrough:///bufnet":              false,
		"xds:///pulse":                       false,
		"":                                   false,
		"dns:":                               false,
		"dns://":                             false,
		"localhost\x00.evil.example:1":       false,
		"[::ffff:127.0.0.1]:1":               true,
		"dns:///[::1]:1":                     true,
		"dns:///control-api:1,localhost:2":   false,
		"passthrough:///localhost:1/../evil": false,
	} {
		if got := loopbackTarget(target); got != want {
			t.Errorf("loopbackTarget(%q) = %v, want %v", target, got, want)
		}
	}
}

func TestPlaintextCredentialsAreRefusedBeyondLoopback(t *testing.T) {
	t.Parallel()
	creds := WithUserPass("producer", "s3cret")

	t.Run("Client", func(t *testing.T) {
		t.Parallel()
		for _, target := range []string{"control-api:50051", "dns:///control-api:50051", "10.0.0.1:50051"} {
			c, err := NewClient(target, creds)
			if !errors.Is(err, ErrPlaintextCredentials) {
				t.Fatalf("NewClient(%q) with credentials over plaintext: err = %v, want ErrPlaintextCredentials", target, err)
			}
			if c != nil {
				t.Fatal("no client on a refusal")
			}
		}
		for name, opts := range map[string][]ClientOption{
			"Loopback":      nil,
			"NoCredentials": {WithDialOptions()},
		} {
			target := "control-api:50051"
			if name == "Loopback" {
				target, opts = "127.0.0.1:50051", []ClientOption{creds}
			}
			c, err := NewClient(target, opts...)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			_ = c.Close()
		}
		for name, opt := range map[string]ClientOption{
			"TLS":        WithTLS(nil),
			"OptedIn":    AllowPlaintextCredentials(),
			"PerRPCOnly": WithDialOptions(),
		} {
			opts := []ClientOption{creds, opt}
			c, err := NewClient("control-api:50051", opts...)
			if name == "PerRPCOnly" {
				if !errors.Is(err, ErrPlaintextCredentials) {
					t.Fatalf("%s: err = %v, want ErrPlaintextCredentials", name, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			_ = c.Close()
		}
	})

	t.Run("WorkerChecksEveryTarget", func(t *testing.T) {
		t.Parallel()
		_, err := NewWorker([]string{"127.0.0.1:50052", "gw-2:50052"}, creds)
		if !errors.Is(err, ErrPlaintextCredentials) {
			t.Fatalf("err = %v, want ErrPlaintextCredentials", err)
		}
		if want := `"gw-2:50052"`; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("the error names the target %s: %v", want, err)
		}
		if _, err := NewWorker([]string{"127.0.0.1:50052", "gw-2:50052"}, creds, WithTLS(&tls.Config{})); err != nil {
			t.Fatal(err)
		}
		if _, err := NewWorker([]string{"gw-1:50052"}, creds, AllowPlaintextCredentials()); err != nil {
			t.Fatal(err)
		}
		if _, err := NewWorker([]string{"gw-1:50052"}); err != nil {
			t.Fatal("no credentials, nothing to protect:", err)
		}
	})
}

func TestWithTLSFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caFile, certFile, keyFile := writeTestCert(t, dir)
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}

	for name, files := range map[string][3]string{
		"SystemRoots":            {"", "", ""},
		"CA":                     {caFile, "", ""},
		"CAAndClientCertificate": {caFile, certFile, keyFile},
		"ClientCertificateAlone": {"", certFile, keyFile},
	} {
		c, err := NewClient("control-api:1", WithTLSFiles(files[0], files[1], files[2]), WithUserPass("u", "p"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		_ = c.Close()
	}
	for name, c := range map[string]struct {
		files [3]string
		want  string
	}{
		"MissingCA":        {[3]string{filepath.Join(dir, "nope.pem"), "", ""}, "nope.pem"},
		"GarbageCA":        {[3]string{garbage, "", ""}, "holds no PEM certificate"},
		"CertWithoutKey":   {[3]string{"", certFile, ""}, "both the certificate file and the key file"},
		"KeyWithoutCert":   {[3]string{"", "", keyFile}, "both the certificate file and the key file"},
		"KeyIsNotAKey":     {[3]string{"", certFile, garbage}, "garbage.pem"},
		"KeyOfAnotherCert": {[3]string{"", caFile, keyFile}, "TLS client certificate"},
	} {
		_, err := NewClient("localhost:1", WithTLSFiles(c.files[0], c.files[1], c.files[2]))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, c.want)
		}
		_, err = NewWorker([]string{"localhost:1"}, WithTLSFiles(c.files[0], c.files[1], c.files[2]))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s (worker): err = %v, want it to mention %q", name, err, c.want)
		}
	}
}

func TestWithTLSCopiesItsConfig(t *testing.T) {
	t.Parallel()
	cfg := &tls.Config{ServerName: "pulse.example"}
	var c clientConfig
	WithTLS(cfg).applyClient(&c)
	cfg.ServerName = "changed"
	if c.conn.tls.ServerName != "pulse.example" {
		t.Fatal("a later change to the caller's config leaked into the client")
	}
	if c.conn.tls.MinVersion != tls.VersionTLS12 {
		t.Fatalf("MinVersion = %x, want TLS 1.2 at least", c.conn.tls.MinVersion)
	}
}

// writeTestCert writes a CA and a client certificate it signed, as PEM
// files in dir.
func writeTestCert(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "worker-1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for file, block := range map[string]*pem.Block{
		caFile:   {Type: "CERTIFICATE", Bytes: caDER},
		certFile: {Type: "CERTIFICATE", Bytes: der},
		keyFile:  {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}
