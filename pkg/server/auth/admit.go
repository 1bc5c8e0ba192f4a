package auth

import (
	"context"
	"strings"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// admit is the one decision both transports make: open mode admits all as
// Anonymous; Public admits without credentials; otherwise the caller's
// address and user name must not have used up their failed attempts, the
// credentials must be good and the role admitted. source is the caller's
// address (failed attempts are counted by it); what names the call in a
// PermissionDenied message. Every refusal is reported to OnRefusal's
// function with its reason.
func (a *Authenticator) admit(ctx context.Context, roles []Role, header, source, what string) (context.Context, error) {
	if a == nil {
		return WithIdentity(ctx, Anonymous), nil
	}
	if unauthenticated.Allowed(roles) {
		return WithIdentity(ctx, unauthenticated), nil
	}
	header = strings.TrimSpace(header)
	if header == "" && a.certs != nil {
		if ctx, err, ok := a.admitCert(ctx, roles, what); ok {
			return ctx, err
		}
	}
	if header == "" {
		a.refused(RefusalMissing)
		return nil, apierr.Unauthenticated(msgMissing)
	}
	user := basicUser(header)
	if wait, limited := a.fails.limited(source, user); limited {
		a.refused(RefusalRateLimited)
		return nil, apierr.ResourceExhausted(msgRateLimited, wait)
	}
	id, err := a.authenticate(ctx, header)
	if err != nil {
		if apierr.KindOf(err) == apierr.KindResourceExhausted {
			a.refused(RefusalRateLimited)
			return nil, err
		}
		a.fails.fail(source, user)
		a.refused(RefusalInvalid)
		return nil, err
	}
	if !id.Allowed(roles) {
		a.refused(RefusalForbidden)
		return nil, apierr.PermissionDenied("role " + string(id.Role) + " may not call " + what + "; it needs " + describe(roles))
	}
	return WithIdentity(ctx, id), nil
}
