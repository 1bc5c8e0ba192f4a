// Package logging builds the structured JSON logger every pulse service
// writes, and declares the attribute keys they share so that one job, worker
// or loop can be followed across services by the same field name.
//
// Job arguments are never logged: they belong to the application.
package logging
