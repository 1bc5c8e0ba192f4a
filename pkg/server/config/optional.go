package config

import (
	"fmt"
	"time"
)

// OptionalDuration is a duration variable that may be left unset: Set
// tells "not given" from any value, 0 included. Give it no default tag.
type OptionalDuration struct { //nolint:recvcheck // Decode must take a pointer (envconfig.Decoder); reads take a copy
	D   time.Duration
	Set bool
}

// Decode implements envconfig.Decoder; envconfig calls it only for a
// variable that is set.
func (o *OptionalDuration) Decode(value string) error {
	d, err := time.ParseDuration(value)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 500ms, 2s or 1h", value)
	}
	o.D, o.Set = d, true
	return nil
}

// Ptr is the duration when set, else nil.
func (o OptionalDuration) Ptr() *time.Duration {
	if !o.Set {
		return nil
	}
	d := o.D
	return &d
}

// String shows the value, or "unset".
func (o OptionalDuration) String() string {
	if !o.Set {
		return "unset"
	}
	return o.D.String()
}
