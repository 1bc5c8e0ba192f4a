package config

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/kelseyhightower/envconfig"
)

// Prefix is prepended, with an underscore, to every variable a spec reads.
const Prefix = "PULSE"

// Error is a configuration problem tied to one environment variable, so an
// operator reading a crash log knows exactly which setting to change.
type Error struct {
	// Var is the full variable name, e.g. "PULSE_LEASE_TTL".
	Var string
	// Err says what is wrong with its value.
	Err error
}

func (e *Error) Error() string { return "config: " + e.Var + ": " + e.Err.Error() }

// Unwrap exposes the underlying parse or validation error.
func (e *Error) Unwrap() error { return e.Err }

// Invalid builds the error a Validate method returns for a bad value, so
// validation failures read exactly like parse failures.
func Invalid(envVar, format string, args ...any) error {
	return &Error{Var: envVar, Err: fmt.Errorf(format, args...)}
}

// Load fills spec, a pointer to a struct, from PULSE_* variables and then
// runs its Validate method when it has one. Errors name the variable.
func Load(spec any) error {
	if err := envconfig.Process(Prefix, spec); err != nil {
		return rewrite(err)
	}
	if v, ok := spec.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			var ce *Error
			if errors.As(err, &ce) {
				return err
			}
			return fmt.Errorf("config: %w", err)
		}
	}
	return nil
}

var requiredRE = regexp.MustCompile(`^required key (\S+) missing value$`)

// rewrite turns envconfig's errors, which lead with the Go field, into ones
// that lead with the variable.
func rewrite(err error) error {
	var pe *envconfig.ParseError
	if errors.As(err, &pe) {
		return &Error{Var: pe.KeyName, Err: pe.Err}
	}
	if m := requiredRE.FindStringSubmatch(err.Error()); m != nil {
		// envconfig reports an envconfig:"NAME" key without the prefix.
		return &Error{Var: withPrefix(m[1]), Err: errors.New("required but not set")}
	}
	return fmt.Errorf("config: %w", err)
}

func withPrefix(key string) string {
	if strings.HasPrefix(key, Prefix+"_") {
		return key
	}
	return Prefix + "_" + key
}

// Vars lists every variable spec reads, in field order, exactly as Load
// would look them up. Deployment manifests are checked against it. spec may
// be a struct or a pointer to one; it is not modified.
func Vars(spec any) ([]string, error) {
	t := reflect.TypeOf(spec)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("config: %w", envconfig.ErrInvalidSpecification)
	}
	// envconfig's own key derivation (split_words, envconfig tags, nested
	// structs) is reachable only through its usage template, so ask it.
	var buf bytes.Buffer
	fresh := reflect.New(t).Interface()
	if err := envconfig.Usagef(Prefix, fresh, &buf, "{{range .}}{{usage_key .}}\n{{end}}"); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return strings.Fields(buf.String()), nil
}
