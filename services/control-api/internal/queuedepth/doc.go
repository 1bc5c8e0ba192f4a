// Package queuedepth refreshes control-api's pulse_queue_depth gauge from
// one grouped count on an interval, so a Prometheus scrape never touches
// the database and the count's cost does not grow with the number of
// scrapers or gateway replicas.
package queuedepth
