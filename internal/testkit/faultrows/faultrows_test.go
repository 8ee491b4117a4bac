package faultrows

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAppend(t *testing.T) {
	t.Setenv(Env, "")
	if err := Append(Row{Scenario: "s"}); err != nil { // unset: nothing written, no error
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "results.jsonl")
	t.Setenv(Env, path)
	rows := []Row{
		{Scenario: "a", Adapter: "x", Sent: 3, Received: 3},
		{Scenario: "b", Adapter: "y", Sent: 5, Received: 4, Lost: 1, AllowedLoss: "at-most-once"},
	}
	for _, r := range rows {
		if err := Append(r); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != len(rows) {
		t.Fatalf("%d lines, want %d: %q", len(lines), len(rows), data)
	}
	for i, line := range lines {
		var got Row
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatal(err)
		}
		if got != rows[i] {
			t.Errorf("line %d: %+v, want %+v", i, got, rows[i])
		}
	}
	if strings.Contains(lines[0], "allowed_loss") || !strings.Contains(lines[1], `"allowed_loss":"at-most-once"`) {
		t.Errorf("allowed_loss should be omitted when empty and kept when set: %q", data)
	}
}
