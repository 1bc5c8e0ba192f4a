// Package pgconn opens the Postgres pool a pulse service runs on: traced,
// named after the service in pg_stat_activity, patient while the database
// starts, and refusing a schema older than the service needs.
package pgconn
