package bridge

import (
	"fmt"
	"net/http"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"time"
)

// profiles serves Go's runtime profiles under /debug/pprof/ in the format
// `go tool pprof` reads (HTTPConfig.Profiling):
//
//	/debug/pprof/                  the list of profiles
//	/debug/pprof/profile?seconds=N CPU profile over N seconds (default 30)
//	/debug/pprof/trace?seconds=N   execution trace over N seconds (default 1)
//	/debug/pprof/NAME[?debug=1]    heap, allocs, goroutine, block, mutex,
//	                               threadcreate (debug=1: as text)
//
// It is written on runtime/pprof rather than by importing net/http/pprof,
// whose init registers the same handlers on http.DefaultServeMux of every
// program that imports this package.
type profiles struct{}

// maxProfileSeconds bounds one CPU profile or trace.
const maxProfileSeconds = 300

func (profiles) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch name {
	case "":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "profile?seconds=N\ntrace?seconds=N")
		for _, p := range pprof.Profiles() {
			fmt.Fprintf(w, "%s (%d)\n", p.Name(), p.Count())
		}
	case "profile", "trace":
		def := 30
		if name == "trace" {
			def = 1
		}
		secs, err := profileSeconds(r, def)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
		if name == "profile" {
			err = pprof.StartCPUProfile(w)
		} else {
			err = trace.Start(w)
		}
		if err != nil { // another profile or trace is running
			w.Header().Del("Content-Disposition")
			http.Error(w, "starting the "+name+": "+err.Error(), http.StatusConflict)
			return
		}
		select {
		case <-time.After(time.Duration(secs) * time.Second):
		case <-r.Context().Done():
		}
		if name == "profile" {
			pprof.StopCPUProfile()
		} else {
			trace.Stop()
		}
	default:
		p := pprof.Lookup(name)
		if p == nil {
			http.Error(w, "no profile named "+strconv.Quote(name), http.StatusNotFound)
			return
		}
		debug, _ := strconv.Atoi(r.FormValue("debug"))
		if debug > 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		} else {
			w.Header().Set("Content-Type", "application/octet-stream")
		}
		_ = p.WriteTo(w, debug)
	}
}

// profileSeconds reads the seconds parameter of r: def when absent, an
// error when it is not a whole number from 1 to maxProfileSeconds.
func profileSeconds(r *http.Request, def int) (int, error) {
	v := r.FormValue("seconds")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxProfileSeconds {
		return 0, fmt.Errorf("seconds=%q: want a whole number from 1 to %d", v, maxProfileSeconds)
	}
	return n, nil
}
