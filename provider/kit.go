package provider

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// Config is what configures every family's client; each family's Config
// embeds it and adds its own fields.
type Config struct {
	Preset  Preset // default: the family's preset
	BaseURL string // default: the preset's
	APIKey  string // sent as the family's auth header says
	HTTP    *http.Client
	Retry   httpx.Retry
	// RateLimit defaults to the preset's; Limiter, when set, is shared.
	RateLimit httpx.RateLimit
	Limiter   *httpx.Limiter
	Limits    sluice.Limits // put over the preset's limits
	// Header is sent with every request.
	Header http.Header
	Logger zerolog.Logger
	Clock  httpx.Clock // default: the system clock
	// FindWindow is how far back Find looks (default: the family's).
	FindWindow time.Duration
	// MaxLine bounds one result line in Decode (default DefaultMaxLine).
	MaxLine int
}

// Wire is how a family speaks HTTP: where the key goes and how error
// bodies read.
type Wire struct {
	AuthHeader string // default "Authorization"
	AuthScheme string // "Bearer" with Authorization
	Errors     httpx.ErrorDecoder
	Header     http.Header // the family's own headers, put over Config.Header
	// FindWindow is the family's default of Config.FindWindow.
	FindWindow time.Duration
}

// Base is what every family's client holds: its preset, base URL, HTTP
// client and the resolved defaults of Config. Embedded, it gives the
// client Name, Codec and Limits.
type Base struct {
	Preset   Preset
	URL      *url.URL      // the base URL, without a trailing slash or fragment
	HC       *httpx.Client // retrying, rate-limited, authenticated
	Clock    httpx.Clock
	Log      zerolog.Logger
	FindBack time.Duration
	MaxLine  int
	limits   sluice.Limits
}

// NewBase resolves cfg for a client of family: the preset (Resolve), the
// base URL, the limits, the clock and the HTTP client.
func NewBase(cfg Config, family Family, w Wire) (Base, error) {
	p, base, err := Resolve(cfg.Preset, family, cfg.BaseURL)
	if err != nil {
		return Base{}, err
	}
	base.Fragment = ""
	b := Base{Preset: p, URL: base, Clock: cfg.Clock, Log: cfg.Logger, FindBack: cfg.FindWindow,
		MaxLine: cfg.MaxLine, limits: p.Limits.Override(cfg.Limits)}
	if b.Clock == nil {
		b.Clock = httpx.SystemClock{}
	}
	if b.FindBack <= 0 {
		b.FindBack = w.FindWindow
	}
	b.HC = httpx.New(b.HTTPConfig(cfg, w))
	return b, nil
}

// HTTPConfig is the httpx configuration NewBase builds its client from,
// for a family that needs a second client (another redirect policy,
// another retry policy).
func (b *Base) HTTPConfig(cfg Config, w Wire) httpx.Config {
	hdr := cfg.Header.Clone()
	for k, vs := range w.Header {
		if hdr == nil {
			hdr = http.Header{}
		}
		hdr[k] = vs
	}
	auth, scheme := w.AuthHeader, w.AuthScheme
	if auth == "" {
		auth, scheme = "Authorization", "Bearer"
	}
	lim := cfg.Limiter
	if b.HC != nil {
		lim = b.HC.Limiter() // one budget for all of a client's HTTP clients
	}
	return httpx.Config{
		HTTP: cfg.HTTP, Retry: cfg.Retry, Limiter: lim,
		RateLimit:  cfg.RateLimit.Or(httpx.RateLimit{PerSecond: b.Preset.RequestsPerSecond, Burst: b.Preset.Burst}),
		AuthHeader: auth, AuthScheme: scheme, APIKey: cfg.APIKey,
		Header: hdr, Errors: w.Errors, Clock: b.Clock, Logger: cfg.Logger,
	}
}

// Choice is the value of a client's option that takes one of choices:
// the first when v is empty, else v if it is one of them; any other is
// an error naming the family (b's preset), the option (what) and the
// choices.
func (b *Base) Choice(what, v string, choices ...string) (string, error) {
	if v == "" {
		return choices[0], nil
	}
	for _, c := range choices {
		if v == c {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s: unknown %s %q (want %s or %s)", b.Preset.Family, what, v,
		strings.Join(choices[:len(choices)-1], ", "), choices[len(choices)-1])
}

func (b *Base) Name() string          { return b.Preset.Name }
func (b *Base) Codec() sluice.Codec   { return b.Preset.Codec() }
func (b *Base) Limits() sluice.Limits { return b.limits }

// Cutoff is the oldest creation time Find looks at.
func (b *Base) Cutoff() time.Time { return b.Clock.Now().Add(-b.FindBack) }

// Join is the base URL joined with path, with the base's own query (Azure's
// classic api-version) merged with q.
func (b *Base) Join(path string, q url.Values) string {
	u := *b.URL
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath = ""
	if len(q) > 0 {
		all := u.Query()
		for k, vs := range q {
			all[k] = vs
		}
		u.RawQuery = all.Encode()
	}
	return u.String()
}

// MaxPages bounds a listing, whatever the server says about more pages.
const MaxPages = 10_000

// Page is one page of a listing: its entries, newest first, and the token
// of the next page ("" after the last).
type Page[T any] struct {
	Items []T
	Next  string
}

// Listing walks a provider's listing, newest first, for Find: every
// family's "list pages until older than the cutoff, prefer a live match".
type Listing[T any] struct {
	// Page fetches the page at token ("" for the first).
	Page func(ctx context.Context, token string) (Page[T], error)
	// Created is an entry's creation time (zero when unknown: never old).
	Created func(*T) time.Time
	// Cutoff, when set, ends the walk after a page whose every entry was
	// created before it.
	Cutoff time.Time
}

// Each hands visit every entry, in listing order, until visit says stop,
// the last page, a repeated page token, a page older than the cutoff, or
// MaxPages.
func (l Listing[T]) Each(ctx context.Context, visit func(*T) (stop bool)) error {
	token := ""
	for page := 0; page < MaxPages; page++ {
		p, err := l.Page(ctx, token)
		if err != nil {
			return err
		}
		allOld := len(p.Items) > 0 && !l.Cutoff.IsZero()
		for i := range p.Items {
			e := &p.Items[i]
			if allOld && l.Created != nil {
				if t := l.Created(e); t.IsZero() || !t.Before(l.Cutoff) {
					allOld = false
				}
			}
			if visit(e) {
				return nil
			}
		}
		if allOld || p.Next == "" || p.Next == token {
			return nil
		}
		token = p.Next
	}
	return nil
}

// Adopt returns the entry to adopt among those match accepts (Adopt): the
// first live one, else the first that ended; nil when none matches.
func (l Listing[T]) Adopt(ctx context.Context, match func(*T) bool, status func(*T) sluice.BatchStatus) (*T, error) {
	var pick Adopt[T]
	err := l.Each(ctx, func(e *T) bool { return match(e) && pick.Offer(e, status(e)) })
	if err != nil {
		return nil, err
	}
	return pick.Best(), nil
}

// First returns the first entry match accepts, or nil.
func (l Listing[T]) First(ctx context.Context, match func(*T) bool) (*T, error) {
	var found *T
	err := l.Each(ctx, func(e *T) bool {
		if match(e) {
			found = e
		}
		return found != nil
	})
	return found, err
}

// Cursor is the next-page token of a listing paged by the id of its last
// entry (after=, after_id=): the answer's last_id, else the id of the
// page's last entry, when the server says there is more; else "".
func Cursor(hasMore bool, lastID, lastEntryID string) string {
	switch {
	case !hasMore:
		return ""
	case lastID != "":
		return lastID
	}
	return lastEntryID
}
