// Package faultrows is the format of the fault scenarios' results: one
// Row per scenario and adapter, written by the tests (build tag faults) as
// JSON lines to the file that RELAY_FAULTS_RESULTS names, and read by
// faults/report, which turns them into the table of docs/reliability.md.
// It is shared so that fault tests outside ./faults (the PostgreSQL
// inbox's) write the same rows.
package faultrows

import (
	"encoding/json"
	"fmt"
	"os"
)

// Env names the environment variable with the results file's path.
const Env = "RELAY_FAULTS_RESULTS"

// Row is one row of the reliability table.
type Row struct {
	Scenario string  `json:"scenario"`
	Adapter  string  `json:"adapter"`
	Sent     int     `json:"sent"`
	Received int     `json:"received"` // distinct IDs received
	Lost     int     `json:"lost"`
	Dups     int     `json:"duplicates"` // deliveries beyond the first per ID
	Seconds  float64 `json:"seconds"`
	// DetectSeconds is how long after the fault began the client reported
	// it (Health turned unhealthy); nil when not measured.
	DetectSeconds *float64 `json:"detect_seconds,omitempty"`
	// RecoverSeconds is how long after the fault ended the client was
	// working again (the longest, over repeated faults); nil when not
	// measured.
	RecoverSeconds *float64 `json:"recover_seconds,omitempty"`
	Note           string   `json:"note,omitempty"`
	// KnownDefect, when set, explains a loss that is an open defect.
	KnownDefect string `json:"known_defect,omitempty"`
	// AllowedLoss, when set, says why the scenario's guarantee permits
	// losing messages (at-most-once); the test itself checks the loss
	// against that guarantee's bound, and the report does not count it
	// as a failure.
	AllowedLoss string `json:"allowed_loss,omitempty"`
}

// Append appends r as one JSON line to the file named by Env, and does
// nothing when Env is unset. Each row is one write to a file opened with
// O_APPEND, so rows of tests running one after the other (go test -p 1,
// as faults/run.sh runs them) never interleave.
func Append(r Row) error {
	path := os.Getenv(Env)
	if path == "" {
		return nil
	}
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("faultrows: encoding the row: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("faultrows: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		_ = f.Close()
		return fmt.Errorf("faultrows: writing %s: %w", path, err)
	}
	return f.Close()
}
