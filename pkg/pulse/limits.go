package pulse

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// checkTopic holds a topic to pulsetype's charset and length before any
// RPC, so a bad name fails where it is written.
func checkTopic(topic string) error {
	switch {
	case topic == "":
		return errors.New("pulse: topic must not be empty")
	case len(topic) > MaxTopicLength:
		return fmt.Errorf("pulse: topic is %d bytes; the limit is %d", len(topic), MaxTopicLength)
	case !pulsetype.ValidTopic(topic):
		return fmt.Errorf("pulse: topic %q has characters outside [A-Za-z0-9._:-] or does not start with a letter or digit", topic)
	}
	return nil
}

// checkIdempotencyKey holds a key to what the server stores: at most
// MaxIdempotencyKeyBytes of valid UTF-8 without NUL.
func checkIdempotencyKey(key string) error {
	switch {
	case len(key) > MaxIdempotencyKeyBytes:
		return fmt.Errorf("pulse: idempotency key is %d bytes; the limit is %d", len(key), MaxIdempotencyKeyBytes)
	case !utf8.ValidString(key):
		return errors.New("pulse: idempotency key is not valid UTF-8")
	case strings.IndexByte(key, 0) >= 0:
		return errors.New("pulse: idempotency key contains a NUL character")
	}
	return nil
}

// checkReplaceKey holds a replace key to what the server stores.
func checkReplaceKey(key string) error {
	switch {
	case key == "":
		return errors.New("pulse: replace key is empty")
	case len(key) > MaxReplaceKeyBytes:
		return fmt.Errorf("pulse: replace key is %d bytes; the limit is %d", len(key), MaxReplaceKeyBytes)
	case !utf8.ValidString(key):
		return errors.New("pulse: replace key is not valid UTF-8")
	case strings.IndexByte(key, 0) >= 0:
		return errors.New("pulse: replace key contains a NUL character")
	}
	return nil
}

// checkRateKey holds a rate key to what the server stores.
func checkRateKey(key string) error { return checkKey("rate key", key, MaxRateKeyBytes) }

// checkKey holds a job's key (what names it) to what the server stores:
// 1..limit bytes of valid UTF-8 without NUL.
func checkKey(what, key string, limit int) error {
	switch {
	case key == "":
		return fmt.Errorf("pulse: %s is empty", what)
	case len(key) > limit:
		return fmt.Errorf("pulse: %s is %d bytes; the limit is %d", what, len(key), limit)
	case !utf8.ValidString(key):
		return fmt.Errorf("pulse: %s is not valid UTF-8", what)
	case strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("pulse: %s contains a NUL character", what)
	}
	return nil
}
