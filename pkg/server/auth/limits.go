package auth

import (
	"context"
	"encoding/base64"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// Refusal is why a call was refused, the reason label of
// pulse_auth_refusals_total.
type Refusal string

// The reasons a call is refused.
const (
	// RefusalMissing: no credentials where some are needed.
	RefusalMissing Refusal = "missing"
	// RefusalInvalid: credentials that match no user or token, or an
	// unsupported scheme.
	RefusalInvalid Refusal = "invalid"
	// RefusalRateLimited: too many failed attempts from the caller's
	// address or for the user name, or every bcrypt slot busy.
	RefusalRateLimited Refusal = "rate_limited"
	// RefusalForbidden: good credentials whose role may not make the call.
	RefusalForbidden Refusal = "forbidden"
)

// Refusals lists every Refusal, for initialising a metric's labels.
var Refusals = []Refusal{RefusalMissing, RefusalInvalid, RefusalRateLimited, RefusalForbidden}

// The default limits on failed authentications and on bcrypt work. A
// source address may fail SourceBurstDefault times at once, then once
// every 1/SourceRateDefault seconds; a user name likewise with its own
// numbers. Successful attempts cost nothing.
const (
	SourceRateDefault  rate.Limit = 1 // failed attempts per second, per source address
	SourceBurstDefault            = 30
	UserRateDefault    rate.Limit = 0.2 // failed attempts per second, per user name
	UserBurstDefault              = 10
	// MaxKeysDefault bounds how many source addresses and how many user
	// names are tracked; when full, keys whose allowance has refilled are
	// dropped, and any new key beyond it shares one allowance.
	MaxKeysDefault = 10_000
	// BcryptSlotsDefault bounds concurrent bcrypt verifications (about
	// 50 ms of CPU each at PasswordCost).
	BcryptSlotsDefault = 4
	// BcryptWaitMax is the longest a check waits for a bcrypt slot before
	// it is refused as rate limited.
	BcryptWaitMax = time.Second
)

// Limits bound what failed authentications may cost. The zero value of a
// field takes its default.
type Limits struct {
	SourceRate  rate.Limit
	SourceBurst int
	UserRate    rate.Limit
	UserBurst   int
	MaxKeys     int
	BcryptSlots int
	// Now is the clock the allowances refill by; nil is time.Now.
	Now func() time.Time
}

func (l Limits) withDefaults() Limits {
	if l.SourceRate <= 0 {
		l.SourceRate = SourceRateDefault
	}
	if l.SourceBurst <= 0 {
		l.SourceBurst = SourceBurstDefault
	}
	if l.UserRate <= 0 {
		l.UserRate = UserRateDefault
	}
	if l.UserBurst <= 0 {
		l.UserBurst = UserBurstDefault
	}
	if l.MaxKeys <= 0 {
		l.MaxKeys = MaxKeysDefault
	}
	if l.BcryptSlots <= 0 {
		l.BcryptSlots = BcryptSlotsDefault
	}
	if l.Now == nil {
		l.Now = time.Now
	}
	return l
}

// SetLimits replaces the limits on failed authentications; call it before
// serving. New starts with the defaults.
func (a *Authenticator) SetLimits(l Limits) {
	l = l.withDefaults()
	a.limits = l
	a.bcrypt = semaphore.NewWeighted(int64(l.BcryptSlots))
	a.fails = &failures{
		now:     l.Now,
		sources: newAllowances(l.SourceRate, l.SourceBurst, l.MaxKeys),
		users:   newAllowances(l.UserRate, l.UserBurst, l.MaxKeys),
	}
}

// OnRefusal calls fn with the reason of every refusal, for
// pulse_auth_refusals_total; call it before serving.
// A nil a (open mode) refuses nothing and ignores it.
func (a *Authenticator) OnRefusal(fn func(Refusal)) {
	if a != nil {
		a.onRefusal = fn
	}
}

func (a *Authenticator) refused(r Refusal) {
	if a.onRefusal != nil {
		a.onRefusal(r)
	}
}

const msgRateLimited = "too many failed authentication attempts; try again later"

// failures holds the allowances of failed attempts by source address and
// by user name.
type failures struct {
	now     func() time.Time
	sources *allowances
	users   *allowances
}

// limited reports whether the source or the user has used up its
// allowance, and when one more attempt will be allowed.
func (f *failures) limited(source, user string) (time.Duration, bool) {
	now := f.now()
	d := f.sources.wait(source, now)
	if user != "" {
		d = max(d, f.users.wait(user, now))
	}
	return d, d > 0
}

// fail spends one attempt of the source's and the user's allowances.
func (f *failures) fail(source, user string) {
	now := f.now()
	f.sources.spend(source, now)
	if user != "" {
		f.users.spend(user, now)
	}
}

// allowances is a bounded map of token buckets. An absent key has its full
// burst; a key whose bucket has refilled is as good as absent, which is
// what pruning relies on.
type allowances struct {
	mu       sync.Mutex
	limit    rate.Limit
	burst    int
	max      int
	m        map[string]*rate.Limiter
	overflow *rate.Limiter
}

func newAllowances(limit rate.Limit, burst, maxKeys int) *allowances {
	return &allowances{limit: limit, burst: burst, max: maxKeys, m: map[string]*rate.Limiter{},
		overflow: rate.NewLimiter(limit, burst)}
}

func (a *allowances) wait(key string, now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.m[key]
	if !ok {
		if len(a.m) < a.max {
			return 0
		}
		l = a.overflow
	}
	tokens := l.TokensAt(now)
	if tokens >= 1 {
		return 0
	}
	secs := (1 - tokens) / float64(a.limit)
	return time.Duration(math.Ceil(secs * float64(time.Second)))
}

func (a *allowances) spend(key string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.m[key]
	if !ok {
		if len(a.m) >= a.max {
			a.prune(now)
		}
		if len(a.m) >= a.max {
			l = a.overflow
		} else {
			l = rate.NewLimiter(a.limit, a.burst)
			a.m[key] = l
		}
	}
	l.AllowN(now, 1)
}

// prune drops every key whose bucket is full again.
func (a *allowances) prune(now time.Time) {
	for k, l := range a.m {
		if l.TokensAt(now) >= float64(a.burst) {
			delete(a.m, k)
		}
	}
}

// len is how many keys are tracked, for tests.
func (a *allowances) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m)
}

// basicUser is the user name of a Basic header, "" for anything else.
func basicUser(header string) string {
	scheme, value, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "Basic") {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(value))
	if err != nil {
		return ""
	}
	name, _, ok := strings.Cut(string(raw), ":")
	if !ok || len(name) > maxNameLen {
		return ""
	}
	return name
}

// errBusy is every bcrypt slot taken for BcryptWaitMax.
var errBusy = apierr.ResourceExhausted("too many password checks in progress; try again shortly", BcryptWaitMax)

// verify runs fn, a bcrypt verification, in one of the limited slots.
func (a *Authenticator) verify(ctx context.Context, fn func() error) error {
	ctx, cancel := context.WithTimeout(ctx, BcryptWaitMax)
	defer cancel()
	if err := a.bcrypt.Acquire(ctx, 1); err != nil {
		return errBusy
	}
	defer a.bcrypt.Release(1)
	return fn()
}

// hostOf drops the port of an address; a value without one is kept.
func hostOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

func retryInfo(d time.Duration) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(d)}
}
