// Package config reads a service's typed configuration from PULSE_*
// environment variables once, at start-up, and reports every problem as an
// error that names the variable an operator has to fix.
//
// Each service declares its own struct with envconfig tags and, optionally, a
// Validate method that uses Invalid for its errors:
//
//	type Config struct {
//		DatabaseURL string        `envconfig:"DATABASE_URL" required:"true"`
//		LeaseTTL    time.Duration `split_words:"true" default:"30s"`
//	}
//
//	func (c *Config) Validate() error {
//		if c.LeaseTTL <= 0 {
//			return config.Invalid("PULSE_LEASE_TTL", "must be positive, got %s", c.LeaseTTL)
//		}
//		return nil
//	}
package config
