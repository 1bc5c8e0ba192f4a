package auth

// TrackedSources is how many source addresses a's failed-attempt
// allowances track.
func TrackedSources(a *Authenticator) int { return a.fails.sources.len() }
