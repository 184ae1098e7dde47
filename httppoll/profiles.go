package httppoll

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pollworker/pollworker/session"
)

// A profiles file holds the worker-side half of a request: credentials and
// TLS settings, which never enter Redis. A session names one (its
// Profile); targets say what to poll, profiles how:
//
//	profiles:
//	  github:
//	    bearer_token_file: /etc/pollworker/secrets/github-token
//	    headers:
//	      X-Api-Key: {file: /etc/pollworker/secrets/api-key}  # or {env: NAME}, or a plain string
//	    basic_auth: {username: bot, password_file: /etc/pollworker/secrets/pw}
//	    tls: {ca_file: /etc/pollworker/ca.pem, cert_file: c.pem, key_file: k.pem, server_name: api.internal, insecure_skip_verify: false}
//
// Files are read when a poll needs them and read again when they change
// (size, modification time or the file itself, as a Kubernetes secret
// update swaps it), checked at most every Config.ProfileRecheck (100ms),
// so a rotated token is used from the next poll that starts 100ms or more
// after the rotation. A file
// that cannot be read, is empty, or an unset variable fails the polls of
// the profile's sessions with an error naming the profile and the file or
// variable; the request is never sent without its credentials.

// ErrProfiles is wrapped by the errors of ParseProfiles and LoadProfiles.
var ErrProfiles = errors.New("httppoll: invalid profiles")

// Profile is a worker-side profile: how to authenticate a session's
// requests and which TLS settings to use. The zero Profile adds nothing.
type Profile struct {
	// BearerTokenFile holds a token sent as "Authorization: Bearer <token>"
	// (surrounding white space trimmed).
	BearerTokenFile string `yaml:"bearer_token_file"`
	// Headers are sent with every request of the profile's sessions,
	// after the session's own headers (so they win), before the fencing
	// headers (which nothing overrides).
	Headers map[string]SecretValue `yaml:"headers"`
	// BasicAuth sends "Authorization: Basic ...".
	BasicAuth *BasicAuth `yaml:"basic_auth"`
	// TLS configures the connections of the profile's sessions.
	TLS *TLSFiles `yaml:"tls"`
}

// SecretValue is a header value: a plain string, {file: PATH} (the
// file's contents, white space trimmed) or {env: NAME}.
type SecretValue struct {
	Value string
	File  string
	Env   string
}

// UnmarshalYAML reads a plain string or a mapping with exactly one of
// file and env.
func (v *SecretValue) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		v.Value = n.Value
		return nil
	}
	var m struct {
		File string `yaml:"file"`
		Env  string `yaml:"env"`
	}
	if err := decodeStrict(n, &m); err != nil {
		return err
	}
	if (m.File == "") == (m.Env == "") {
		return fmt.Errorf("line %d: want a string, {file: PATH} or {env: NAME}", n.Line)
	}
	v.File, v.Env = m.File, m.Env
	return nil
}

// BasicAuth is a user name and a password read from a file.
type BasicAuth struct {
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
}

// TLSFiles are the TLS settings of a profile. CAFile replaces the system
// roots for the profile's sessions (only); CertFile and KeyFile are a
// client certificate, given together.
type TLSFiles struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// decodeStrict decodes n into out, refusing unknown fields.
func decodeStrict(n *yaml.Node, out any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// ParseProfiles reads a profiles file: a mapping with one key, "profiles",
// of profile names (session.ValidProfileName) to profiles. Unknown fields
// are refused. It checks the shape only: files are read when polls need
// them.
func ParseProfiles(raw []byte) (map[string]Profile, error) {
	var doc struct {
		Profiles map[string]Profile `yaml:"profiles"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s", ErrProfiles, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Profiles)) {
		if err := validateProfile(name, doc.Profiles[name]); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrProfiles, err)
		}
	}
	return doc.Profiles, nil
}

// LoadProfiles reads the profiles file at path (ParseProfiles).
func LoadProfiles(path string) (map[string]Profile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProfiles, err)
	}
	ps, err := ParseProfiles(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ps, nil
}

// validateProfile checks profile name's shape.
func validateProfile(name string, p Profile) error {
	if err := session.ValidProfileName(name); err != nil {
		return fmt.Errorf("profile name %w", err)
	}
	if err := validateProfileHeaders(name, p); err != nil {
		return err
	}
	if p.BasicAuth != nil && (p.BasicAuth.Username == "" || p.BasicAuth.PasswordFile == "") {
		return fmt.Errorf("profile %s: basic_auth needs username and password_file", name)
	}
	if p.BasicAuth != nil && p.BearerTokenFile != "" {
		return fmt.Errorf("profile %s: give bearer_token_file or basic_auth, not both", name)
	}
	if t := p.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		return fmt.Errorf("profile %s: tls cert_file and key_file go together", name)
	}
	return nil
}

// validateProfileHeaders checks the names and plain values of profile
// name's headers: valid names, not the transport's or the fencing ones,
// no control characters, and no Authorization beside
// bearer_token_file/basic_auth.
func validateProfileHeaders(name string, p Profile) error {
	for _, h := range slices.Sorted(maps.Keys(p.Headers)) { // sorted: the same first error every time
		credential := strings.EqualFold(h, "Authorization") || strings.EqualFold(h, "Proxy-Authorization")
		switch r := session.ReservedHeader(h); {
		case !session.ValidHeaderName(h):
			return fmt.Errorf("profile %s: header %.40q is not a valid header name", name, h)
		case r != "" && !credential:
			return fmt.Errorf("profile %s: header %s %s", name, h, r)
		case !session.ValidHeaderValue(p.Headers[h].Value):
			return fmt.Errorf("profile %s: the value of header %s holds a control character", name, h)
		case strings.EqualFold(h, "Authorization") && (p.BearerTokenFile != "" || p.BasicAuth != nil):
			return fmt.Errorf("profile %s: give header Authorization or bearer_token_file/basic_auth, not both", name)
		}
	}
	return nil
}

// ProfileLabelValue is the value of a worker's ProfileLabel.
const ProfileLabelValue = "yes"

// ProfileLabel is the label key by which a worker announces it has profile
// name (pollworker run adds "profile/<name>=yes" to its --labels): a
// session whose --selector includes it is placed only on such workers,
// and sessions add/apply warn when no live worker has it.
func ProfileLabel(name string) string { return "profile/" + name }

// ProfileError is returned (wrapped) by a poll whose profile cannot be
// applied: unknown on this worker, or a file or variable it needs cannot
// be read. The request is not sent. It never holds a secret.
type ProfileError struct {
	// Profile is the session's profile.
	Profile string
	// Reason says what is wrong.
	Reason string
	// Unknown is true when this worker has no such profile.
	Unknown bool
}

// Error names the profile and the problem.
func (e *ProfileError) Error() string {
	return fmt.Sprintf("httppoll: profile %s: %s", e.Profile, e.Reason)
}

// profiles are the live profiles of a Poller.
type profiles struct {
	worker string
	byName map[string]*liveProfile
	names  string // sorted, comma-separated, for errors
}

// newProfiles prepares ps; base is the transport TLS profiles clone (nil
// when the Poller's client has no *http.Transport: then a TLS profile is
// a configuration error).
func newProfiles(worker string, ps map[string]Profile, recheck time.Duration, base *http.Transport, redirect func(*http.Request, []*http.Request) error) (*profiles, error) {
	out := &profiles{worker: worker, byName: make(map[string]*liveProfile, len(ps)), names: strings.Join(slices.Sorted(maps.Keys(ps)), ", ")}
	for _, name := range slices.Sorted(maps.Keys(ps)) {
		p := ps[name]
		if err := validateProfile(name, p); err != nil {
			return nil, fmt.Errorf("%w: Profiles: %w", ErrConfig, err)
		}
		lp := &liveProfile{name: name, p: p}
		if p.BearerTokenFile != "" {
			lp.bearer = &watchedFile{path: p.BearerTokenFile, recheck: recheck}
		}
		if p.BasicAuth != nil {
			lp.password = &watchedFile{path: p.BasicAuth.PasswordFile, recheck: recheck}
		}
		for _, h := range slices.Sorted(maps.Keys(p.Headers)) {
			v := p.Headers[h]
			hv := headerValue{name: http.CanonicalHeaderKey(h), value: v.Value, env: v.Env}
			if v.File != "" {
				hv.file = &watchedFile{path: v.File, recheck: recheck}
			}
			lp.headers = append(lp.headers, hv)
		}
		if p.TLS != nil {
			if base == nil {
				return nil, fmt.Errorf("%w: Profiles: profile %s has tls settings, which need Config.HTTP's Transport to be an *http.Transport", ErrConfig, name)
			}
			lp.tls = &tlsClient{files: *p.TLS, base: base, redirect: redirect,
				ca: watchedFile{path: p.TLS.CAFile, recheck: recheck}, cert: watchedFile{path: p.TLS.CertFile, recheck: recheck},
				key: watchedFile{path: p.TLS.KeyFile, recheck: recheck}}
		}
		out.byName[name] = lp
	}
	return out, nil
}

// check applies each profile, as a poll would, to a request it never
// sends, and returns why each one that cannot be applied now cannot.
func (ps *profiles) check() []error {
	var errs []error
	for _, name := range ps.list() {
		req, err := http.NewRequest(http.MethodGet, "http://profile-check.invalid/", nil)
		if err != nil {
			return append(errs, err)
		}
		if _, err := ps.byName[name].apply(req); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// list returns the profile names, sorted.
func (ps *profiles) list() []string { return slices.Sorted(maps.Keys(ps.byName)) }

// apply adds profile name's credentials to req and returns the client to
// send it with (nil: the Poller's own), or why it cannot be sent.
func (ps *profiles) apply(name string, req *http.Request) (*http.Client, error) {
	lp, ok := ps.byName[name]
	if !ok {
		has := ps.names
		if has == "" {
			has = "none; start it with --profiles"
		}
		return nil, &ProfileError{Profile: name, Unknown: true,
			Reason: fmt.Sprintf("not configured on worker %s (its profiles: %s): the session is not polled here", ps.worker, has)}
	}
	return lp.apply(req)
}

// liveProfile is a Profile with its files watched.
type liveProfile struct {
	name     string
	p        Profile
	bearer   *watchedFile
	password *watchedFile
	headers  []headerValue
	tls      *tlsClient
}

// headerValue is one header of a profile.
type headerValue struct {
	name, value, env string
	file             *watchedFile
}

func (lp *liveProfile) fail(format string, a ...any) error {
	return &ProfileError{Profile: lp.name, Reason: fmt.Sprintf(format, a...)}
}

func (lp *liveProfile) apply(req *http.Request) (*http.Client, error) {
	for _, h := range lp.headers {
		v := h.value
		switch {
		case h.file != nil:
			s, err := h.file.read()
			if err != nil {
				return nil, lp.fail("header %s: %v", h.name, err)
			}
			v = s
		case h.env != "":
			s, ok := os.LookupEnv(h.env)
			if !ok || s == "" {
				return nil, lp.fail("header %s: environment variable %s is unset or empty", h.name, h.env)
			}
			v = s
		}
		req.Header[h.name] = []string{v}
	}
	if lp.bearer != nil {
		tok, err := lp.bearer.read()
		if err != nil {
			return nil, lp.fail("bearer_token_file: %v", err)
		}
		req.Header["Authorization"] = []string{"Bearer " + tok}
	}
	if lp.password != nil {
		pw, err := lp.password.read()
		if err != nil {
			return nil, lp.fail("basic_auth password_file: %v", err)
		}
		req.SetBasicAuth(lp.p.BasicAuth.Username, pw)
	}
	if lp.tls == nil {
		return nil, nil
	}
	c, err := lp.tls.client()
	if err != nil {
		return nil, lp.fail("tls: %v", err)
	}
	return c, nil
}

// watchedFile is a file read again when it changes.
type watchedFile struct {
	path    string
	recheck time.Duration // stat at most this often; <= 0: at every read

	mu      sync.Mutex
	info    os.FileInfo // of the last successful read; nil before
	value   string
	checked time.Time // of the last stat that found info current
}

// read returns the file's contents, white space trimmed, reading it again
// when its size, modification time or identity changed. Errors name the
// file, never its contents.
func (f *watchedFile) read() (string, error) {
	v, _, err := f.readChanged()
	return v, err
}

// readChanged is read, and whether the contents were (re)read.
func (f *watchedFile) readChanged() (string, bool, error) {
	now := time.Now()
	f.mu.Lock()
	if f.info != nil && f.recheck > 0 && now.Sub(f.checked) < f.recheck {
		v := f.value
		f.mu.Unlock()
		return v, false, nil
	}
	f.mu.Unlock()
	fi, err := os.Stat(f.path)
	if err != nil {
		return "", false, fileError(f.path, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.info != nil && os.SameFile(fi, f.info) && fi.Size() == f.info.Size() && fi.ModTime().Equal(f.info.ModTime()) {
		f.checked = now
		return f.value, false, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		f.info = nil
		return "", false, fileError(f.path, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		f.info = nil
		return "", false, fmt.Errorf("file %s is empty", f.path)
	}
	f.info, f.value, f.checked = fi, v, now
	return v, true, nil
}

// fileError says why path cannot be read, naming it once.
func fileError(path string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("cannot read %s: %v", path, pe.Err)
	}
	return fmt.Errorf("cannot read %s: %v", path, err)
}

// tlsClient is the HTTP client of a profile with TLS settings, built
// again when one of its files changes.
type tlsClient struct {
	files    TLSFiles
	base     *http.Transport
	redirect func(*http.Request, []*http.Request) error

	ca, cert, key watchedFile

	mu      sync.Mutex
	current *http.Client
}

// client returns the profile's client, rebuilt when a file changed. A
// rebuild that fails drops the client it replaces: its polls fail until
// the files are usable again, rather than trust what the files no longer
// say.
func (t *tlsClient) client() (*http.Client, error) {
	changed := false
	for _, f := range []*watchedFile{&t.ca, &t.cert, &t.key} {
		if f.path == "" {
			continue
		}
		_, c, err := f.readChanged()
		if err != nil {
			return nil, err
		}
		changed = changed || c
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.current != nil && !changed {
		return t.current, nil
	}
	if t.current != nil {
		t.current.CloseIdleConnections()
		t.current = nil
	}
	cfg, err := t.config()
	if err != nil {
		return nil, err
	}
	tr := t.base.Clone()
	tr.TLSClientConfig = cfg
	t.current = &http.Client{Transport: tr, CheckRedirect: t.redirect}
	return t.current, nil
}

// config is the TLS configuration the profile's files give now.
func (t *tlsClient) config() (*tls.Config, error) {
	cfg := &tls.Config{ServerName: t.files.ServerName, InsecureSkipVerify: t.files.InsecureSkipVerify, //nolint:gosec // the operator's explicit choice
		ClientSessionCache: tls.NewLRUClientSessionCache(64)}
	if t.files.CAFile != "" {
		ca, _ := t.ca.read()
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(ca)) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", t.files.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.files.CertFile != "" {
		cert, _ := t.cert.read()
		key, _ := t.key.read()
		pair, err := tls.X509KeyPair([]byte(cert), []byte(key))
		if err != nil {
			return nil, fmt.Errorf("cert_file %s and key_file %s: not a certificate and its key", t.files.CertFile, t.files.KeyFile)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// closeIdle closes the idle connections of every TLS profile's client.
func (ps *profiles) closeIdle() {
	for _, lp := range ps.byName {
		if lp.tls == nil {
			continue
		}
		lp.tls.mu.Lock()
		if lp.tls.current != nil {
			lp.tls.current.CloseIdleConnections()
		}
		lp.tls.mu.Unlock()
	}
}
