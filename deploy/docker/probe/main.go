// Command pulse-probe is the container healthcheck of the pulse images. The
// runtime image (distroless static) has no shell, curl or wget, so each
// image carries this static binary: it GETs one URL and exits 0 when the
// answer is 200 OK and 1 otherwise (any other status, a refused connection,
// a timeout), printing why on stderr.
//
// Usage:
//
//	pulse-probe [-timeout 2s] URL
//
// docker-compose.yml runs it as
// ["CMD", "/pulse-probe", "http://127.0.0.1:9101/readyz"].
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// timeoutDefault stays below the compose healthcheck timeout, so the probe
// reports its own failure instead of being killed.
const timeoutDefault = 2 * time.Second

func main() {
	fs := flag.NewFlagSet("pulse-probe", flag.ContinueOnError)
	timeout := fs.Duration("timeout", timeoutDefault, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: pulse-probe [-timeout 2s] URL\n\nExits 0 when GET URL answers 200 OK, 1 otherwise.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		os.Exit(2)
	}
	if err := probe(fs.Arg(0), *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "pulse-probe:", err)
		os.Exit(1)
	}
}

func probe(url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, body)
	}
	return nil
}
