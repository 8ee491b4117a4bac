package bridge

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-relay/relay"
)

// The status page served on GET /: one HTML document with its CSS and
// JavaScript inline, so that it needs nothing but the bridge's HTTP port.
// The server renders a first snapshot of Status into the table (the page
// is readable without JavaScript, and reloads itself every
// pageNoScriptRefresh); the script then polls /routes every
// pageRefresh, keeps the last minutes of samples per route in the
// browser and draws the charts.
//
//go:embed statuspage/page.html statuspage/page.css statuspage/page.js
var pageFiles embed.FS

const (
	// pageRefresh is how often the page's script polls /routes, in
	// seconds; ?refresh=N on the page's URL overrides it (0.2 to 60).
	pageRefresh = 2
	// pageNoScriptRefresh is how often the page reloads itself when
	// JavaScript is off, in seconds.
	pageNoScriptRefresh = 10
)

// statusPage is the parsed page and its Content-Security-Policy, which
// allows exactly its own inline style and script (by hash) and requests
// to the bridge itself: the page can load nothing from elsewhere.
var statusPage = mustParsePage()

type page struct {
	tmpl *template.Template
	css  template.CSS
	js   template.JS
	csp  string
}

func mustParsePage() *page {
	read := func(name string) string {
		b, err := pageFiles.ReadFile("statuspage/" + name)
		if err != nil {
			panic("bridge: status page: " + err.Error())
		}
		return string(b)
	}
	css, js := read("page.css"), read("page.js")
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return &page{
		tmpl: template.Must(template.New("page").Parse(read("page.html"))),
		// Both are our own embedded files, not input: safe to trust.
		css: template.CSS(css),
		js:  template.JS(js),
		csp: "default-src 'none'; style-src " + hash(css) + "; script-src " + hash(js) +
			"; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	}
}

// pageView is what the template renders: the Status as display text.
type pageView struct {
	Bridge, Instance        string
	StartedISO, StartedText string
	TimeISO, TimeText       string
	RefreshSeconds          int
	NoScriptRefresh         int
	Routes                  []RouteStatus
	Rows                    []pageRow
	CSS                     template.CSS
	JS                      template.JS
}

type pageRow struct {
	Name, State, NotReady, From, To       string
	Holds                                 string
	Forwarded, Skipped, Rate, Lag         string
	InFlight, InFlightBytes               string
	Retries, Failed, Poisoned             string
	LastError, LastErrorISO, LastErrorAgo string
	// Cutover is when the route became caught up, or why it cannot.
	Cutover, StopWhen string
	// RecoveredISO and RecoveredAgo are set once the route recovered
	// from LastError: the page shows it muted, not as a live error.
	RecoveredISO, RecoveredAgo string
}

// serve writes the page with st as its first snapshot. It is safe for
// concurrent use; every string of st is escaped by html/template.
func (p *page) serve(w http.ResponseWriter, st Status) {
	v := pageView{
		Bridge:          st.Bridge,
		Instance:        st.Instance,
		StartedText:     "not yet",
		TimeISO:         st.Time.Format(time.RFC3339Nano),
		TimeText:        pageTime(st.Time),
		RefreshSeconds:  pageRefresh,
		NoScriptRefresh: pageNoScriptRefresh,
		Routes:          st.Routes,
		CSS:             p.css,
		JS:              p.js,
	}
	if st.Started != nil {
		v.StartedISO, v.StartedText = st.Started.Format(time.RFC3339Nano), pageTime(*st.Started)
	}
	for _, rs := range st.Routes {
		row := pageRow{
			Name:      rs.Name,
			State:     rs.State,
			From:      pageEnd(rs.From),
			To:        pageEnd(rs.To),
			Forwarded: pageInt(rs.Forwarded),
			Rate:      pageRate(rs.ForwardedPerSec10s),
			Lag:       "unknown",
			InFlight:  pageInt(rs.InFlight),
			Retries:   pageInt(rs.Retries),
			Failed:    pageInt(rs.Failed),
			Poisoned:  pageInt(rs.Poisoned),
		}
		if rs.NotReady != nil {
			row.NotReady = *rs.NotReady
		}
		row.StopWhen = rs.StopWhen
		switch {
		case rs.CaughtUpSince != nil:
			row.Cutover = "since " + rs.CaughtUpSince.UTC().Format("2006-01-02 15:04:05Z")
		case rs.CaughtUpUnknown != nil:
			row.Cutover = "no cutover signal: " + *rs.CaughtUpUnknown
		}
		row.Holds = pageHolds(rs.Holds)
		switch {
		case rs.Looped > 0 && rs.Duplicates > 0:
			row.Skipped = pageInt(rs.Looped) + " looped, " + pageInt(rs.Duplicates) + " duplicates"
		case rs.Looped > 0:
			row.Skipped = pageInt(rs.Looped) + " looped"
		case rs.Duplicates > 0:
			row.Skipped = pageInt(rs.Duplicates) + " duplicates"
		}
		if rs.SourceLag != nil {
			row.Lag = pageInt(*rs.SourceLag)
		}
		if rs.InFlightBytes > 0 {
			row.InFlightBytes = pageBytes(rs.InFlightBytes)
		}
		if le := rs.LastError; le != nil {
			row.LastError, row.LastErrorISO = le.Message, le.Time.Format(time.RFC3339Nano)
			row.LastErrorAgo = pageSpan(st.Time.Sub(le.Time)) + " ago"
			if ra := le.RecoveredAt; ra != nil {
				row.RecoveredISO, row.RecoveredAgo = ra.Format(time.RFC3339Nano), pageSpan(st.Time.Sub(*ra))+" ago"
			}
		}
		v.Rows = append(v.Rows, row)
	}
	var buf bytes.Buffer
	if err := p.tmpl.Execute(&buf, v); err != nil {
		http.Error(w, "relay: bridge status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", p.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	_, _ = w.Write(buf.Bytes())
}

// The formatting below matches the page's script, so that the first
// snapshot and the refreshed table read the same.

func pageTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") + " UTC" }

func pageEnd(e RouteEnd) string {
	s := e.URL
	if e.Topic != "" {
		s = e.Topic + " @ " + e.URL
	}
	if e.Group != "" {
		s += " (group " + e.Group + ")"
	}
	return s
}

// pageInt formats n with thousands separators: 1,843,207.
func pageInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

func pageRate(r float64) string {
	if r >= 100 {
		return strconv.FormatFloat(math.Round(r), 'f', 0, 64) + " /s"
	}
	return strconv.FormatFloat(r, 'f', 1, 64) + " /s"
}

func pageBytes(b int64) string {
	if b < 1000 {
		return strconv.FormatInt(b, 10) + " B"
	}
	units := []string{"B", "kB", "MB", "GB", "TB"}
	f, i := float64(b), 0
	for f >= 1000 && i < len(units)-1 {
		f /= 1000
		i++
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

func pageSpan(d time.Duration) string {
	s := int64(math.Round(max(d, 0).Seconds()))
	switch m, h := s/60, s/3600; {
	case s < 60:
		return strconv.FormatInt(s, 10) + " s"
	case m < 60:
		return strconv.FormatInt(m, 10) + " min"
	case h < 48:
		return strconv.FormatInt(h, 10) + " h"
	default:
		return strconv.FormatInt(h/24, 10) + " d"
	}
}

// pageHolds says what the replica holds of a route's source, as page.js's
// holdsText does; "" when it is not subscribed.
func pageHolds(h *HoldsStatus) string {
	switch {
	case h == nil:
		return ""
	case h.Mode == relay.SharePartitions && len(h.Partitions) == 0:
		return "holds no partition"
	case h.Mode == relay.SharePartitions:
		ps := make([]string, len(h.Partitions))
		for i, p := range h.Partitions {
			ps[i] = strconv.Itoa(int(p))
		}
		return "holds partitions " + strings.Join(ps, ", ")
	case h.Mode == relay.ShareSingleActive && h.Active != nil && *h.Active:
		return "single active consumer"
	case h.Mode == relay.ShareSingleActive:
		return "waiting to be the active consumer"
	}
	return "competing consumer"
}
