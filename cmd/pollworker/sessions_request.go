package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/session"
)

// maxBodyFileBytes bounds --body-file: a session's encoded value is at
// most session.MaxValueBytes.
const maxBodyFileBytes = 32 << 10

// requestFlags are the flags of sessions add that say how the HTTP poller
// asks (issue 24 item 1).
func requestFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "method", Usage: "HTTP method: " + strings.Join(session.Methods, ", "), Value: "GET"},
		&cli.StringSliceFlag{Name: "header", Usage: "'Name: value' sent with every request, for values that are not secret (stored in Redis; credentials go in a worker-side --profile); repeat for several"},
		&cli.StringFlag{Name: "body", Usage: "request body (POST, PUT, PATCH, DELETE); its Content-Type comes from --header"},
		&cli.StringFlag{Name: "body-file", Usage: "read the request body from this file, now (at most 32 KiB)"},
		&cli.StringFlag{Name: "expect", Usage: "statuses that count as success, codes and ranges like 200-299,304; any other is a failure", Value: session.DefaultExpect},
		&cli.StringFlag{Name: "profile", Usage: "name of a worker-side profile (pollworker run --profiles) holding credentials and TLS settings"},
	}
}

// requestFromFlags fills in the request fields of s from cmd's flags; its
// errors are usage errors (one line naming the rule).
func requestFromFlags(cmd *cli.Command, s *session.Session) error {
	s.Method = strings.ToUpper(strings.TrimSpace(cmd.String("method")))
	if s.Method == "GET" {
		s.Method = "" // the default: stored sessions stay as they were
	}
	headers, err := parseHeaders(cmd.StringSlice("header"))
	if err != nil {
		return err
	}
	s.Headers = headers
	s.Body = cmd.String("body")
	if f := cmd.String("body-file"); f != "" {
		if s.Body != "" {
			return errors.New("give --body or --body-file, not both")
		}
		b, err := readBodyFile(f)
		if err != nil {
			return err
		}
		s.Body = b
	}
	expect, err := session.CanonicalExpect(cmd.String("expect"))
	if err != nil {
		return fmt.Errorf("--expect: %w", err)
	}
	if expect == session.DefaultExpect {
		expect = ""
	}
	s.Expect = expect
	s.Profile = strings.TrimSpace(cmd.String("profile"))
	return nil
}

// readBodyFile reads --body-file, at most maxBodyFileBytes.
func readBodyFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--body-file: %w", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxBodyFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("--body-file: %w", err)
	}
	if len(b) > maxBodyFileBytes {
		return "", fmt.Errorf("--body-file %s is longer than %d bytes", path, maxBodyFileBytes)
	}
	return string(b), nil
}

// parseHeaders turns 'Name: value' pairs into a map; names must be
// distinct (case-insensitively).
func parseHeaders(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	headers := make(map[string]string, len(pairs))
	seen := map[string]bool{}
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("--header %.60q must be 'Name: value'", p)
		}
		if seen[strings.ToLower(name)] {
			return nil, fmt.Errorf("--header %s given twice", name)
		}
		seen[strings.ToLower(name)] = true
		headers[name] = strings.TrimSpace(value)
	}
	return headers, nil
}

// formatHeaders prints headers as "Name: value; Name: value", sorted; "-"
// for none.
func formatHeaders(headers map[string]string) string { return formatPairs(headers, ": ", "; ") }
