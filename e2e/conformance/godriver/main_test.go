package main

import (
	"strings"
	"testing"
	"time"
)

func TestLoadConfigNamesTheVariable(t *testing.T) {
	full := map[string]string{envGateways: "a:1, b:2", envTopics: "t", envWorkerID: "w"}
	for name, tc := range map[string]struct {
		unset, key, value, want string
	}{
		"no gateways":      {unset: envGateways, want: envGateways},
		"no topics":        {unset: envTopics, want: envTopics},
		"no worker id":     {unset: envWorkerID, want: envWorkerID},
		"zero concurrency": {key: envConcurrency, value: "0", want: envConcurrency},
		"bad shutdown":     {key: envShutdownTimeout, value: "1s", want: envShutdownTimeout},
	} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range full {
				if k != tc.unset {
					env[k] = v
				}
			}
			if tc.key != "" {
				env[tc.key] = tc.value
			}
			_, err := loadConfig(func(k string) string { return env[k] })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("loadConfig = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	cfg, err := loadConfig(func(k string) string { return full[k] })
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.gateways) != 2 || cfg.concurrency != concurrencyDefault || cfg.shutdownTimeout != 10*time.Second {
		t.Fatalf("defaults: %+v", cfg)
	}
}
