/**
 * Job property ranges, checked before sending so a mistake is reported
 * without a round trip; the server checks them again. They are the Go
 * SDK's (pkg/pulsetype), which the schema holds too. Durations are
 * milliseconds.
 */
export const MIN_PRIORITY = 0;
export const MAX_PRIORITY = 10;
export const MIN_MAX_ATTEMPTS = 1;
export const MAX_MAX_ATTEMPTS = 100;
export const MIN_TIMEOUT_MS = 1_000;
export const MAX_TIMEOUT_MS = 24 * 3_600_000;
export const MIN_UNIQUE_FOR_MS = 1_000;
export const MAX_UNIQUE_FOR_MS = 366 * 24 * 3_600_000;
export const MIN_RETRY_DELAY_MS = 1;
export const MAX_RETRY_DELAY_MS = 366 * 24 * 3_600_000;
export const MAX_IDEMPOTENCY_KEY_BYTES = 255;
export const MAX_TOPIC_LENGTH = 128;
export const MAX_WORKER_ID_BYTES = 200;
/** A topic: a letter or digit, then up to 127 letters, digits, '.', '_', ':' or '-'. */
export const TOPIC_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
/** Where the SDK cuts a handler's error text (half the server's 8 KiB). */
export const MAX_REPORTED_ERROR_BYTES = 4096;
