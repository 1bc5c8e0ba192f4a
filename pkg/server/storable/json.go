package storable

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// jsonb's numeric type holds up to 131072 digits before the decimal point
// and 16383 after it.
const (
	maxNumericWeight = 131072
	maxNumericScale  = 16383
)

// JSON refuses a JSON document that Postgres's jsonb input would reject,
// for the reasons encoding/json does not check: invalid UTF-8 inside a
// string, an escape that decodes to NUL (\u0000), a lone UTF-16 surrogate
// escape, or a number outside numeric's range. doc must already be valid
// JSON (json.Valid); the error names field and the byte offset.
//
// Valid input stays valid: the JSON string "C:\\u0000dir" is a backslash
// followed by the letters u0000, and is accepted.
func JSON(field string, doc []byte) error {
	if !json.Valid(doc) {
		return apierr.Invalid(field, "is not valid JSON")
	}
	for i := 0; i < len(doc); {
		switch c := doc[i]; {
		case c == '"':
			end, err := checkString(field, doc, i)
			if err != nil {
				return err
			}
			i = end
		case c == '-' || (c >= '0' && c <= '9'):
			end := i + 1
			for end < len(doc) && isNumberByte(doc[end]) {
				end++
			}
			if err := checkNumber(field, doc[i:end], i); err != nil {
				return err
			}
			i = end
		default:
			i++
		}
	}
	return nil
}

// checkString checks the string literal starting at doc[start] (a quote)
// and returns the index just past its closing quote.
func checkString(field string, doc []byte, start int) (int, error) {
	i := start + 1
	for i < len(doc) {
		c := doc[i]
		switch {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if doc[i+1] != 'u' {
				i += 2
				continue
			}
			r := hex4(doc[i+2 : i+6])
			switch {
			case r == 0:
				return 0, apierr.Invalid(field, "has \\u0000 at byte %d: a NUL character, which Postgres cannot store", i)
			case r >= 0xDC00 && r <= 0xDFFF:
				return 0, apierr.Invalid(field, "has a lone low surrogate \\u%04x at byte %d", r, i)
			case r >= 0xD800 && r <= 0xDBFF:
				if i+12 > len(doc) || doc[i+6] != '\\' || doc[i+7] != 'u' {
					return 0, apierr.Invalid(field, "has a high surrogate \\u%04x at byte %d not followed by a low surrogate", r, i)
				}
				if lo := hex4(doc[i+8 : i+12]); lo < 0xDC00 || lo > 0xDFFF {
					return 0, apierr.Invalid(field, "has a high surrogate \\u%04x at byte %d not followed by a low surrogate", r, i)
				}
				i += 12
			default:
				i += 6
			}
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(doc[i:])
			if r == utf8.RuneError && size == 1 {
				return 0, apierr.Invalid(field, "is not valid UTF-8 (at byte %d)", i)
			}
			i += size
		}
	}
	return i, nil // unreachable for valid JSON
}

func hex4(b []byte) rune {
	v, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(v)
}

func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// checkNumber refuses a JSON number numeric cannot represent, by
// Postgres's own rules (numeric_in): the display scale — the fraction
// digits as written, minus the exponent — may not exceed 16383, and the
// value may not have more than 131072 digits before the decimal point
// (leading zeros do not count). A zero still has a display scale:
// 0.000e-99999 is refused like any other.
func checkNumber(field string, num []byte, at int) error {
	s := num
	if s[0] == '-' {
		s = s[1:]
	}
	mant, expPart := s, []byte(nil)
	for k, c := range s {
		if c == 'e' || c == 'E' {
			mant, expPart = s[:k], s[k+1:]
			break
		}
	}
	exp := int64(0)
	if len(expPart) > 0 {
		e, err := strconv.ParseInt(string(expPart), 10, 64)
		if err != nil || e >= math.MaxInt32/2 || e <= -(math.MaxInt32/2) {
			return numberRange(field, num, at)
		}
		exp = e
	}
	intPart, frac := mant, []byte(nil)
	for k, c := range mant {
		if c == '.' {
			intPart, frac = mant[:k], mant[k+1:]
			break
		}
	}
	if scale := int64(len(frac)) - exp; scale > maxNumericScale {
		return numberRange(field, num, at)
	}
	// The weight: integer digits once leading zeros are gone.
	digits := string(intPart) + string(frac)
	point := int64(len(intPart))
	for len(digits) > 0 && digits[0] == '0' {
		digits = digits[1:]
		point--
	}
	if len(digits) > 0 && point+exp > maxNumericWeight {
		return numberRange(field, num, at)
	}
	return nil
}

func numberRange(field string, num []byte, at int) error {
	shown := string(num)
	if len(shown) > 40 {
		shown = shown[:40] + "..."
	}
	return apierr.Invalid(field, "has the number %s at byte %d, outside the range Postgres's jsonb can hold", shown, at)
}
