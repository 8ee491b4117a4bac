package examples_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExamplesReadTheBrokerAlike builds every example and checks that each
// takes its broker the same way: the -broker flag (-rabbit and -kafka for
// the migration, which has two), whose default is the environment variable
// of the same name in capitals, and which wins over it. Each run gets URLs
// of a scheme no adapter registers, so it fails at once naming the URL it
// used: no broker is needed.
func TestExamplesReadTheBrokerAlike(t *testing.T) {
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./checkout", "./workqueue", "./outbox", "./requestreply", "./reminders", "./migrate")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	wm := exec.Command("go", "build", "-o", filepath.Join(bin, "watermill-router"), "./examples/router")
	wm.Dir = filepath.Join("..", "compat", "watermill")
	if out, err := wm.CombinedOutput(); err != nil {
		t.Fatalf("go build (compat/watermill): %v\n%s", err, out)
	}
	for _, c := range []struct {
		example string
		flag    string // and its environment variable, in capitals
	}{
		{"checkout", "broker"},
		{"workqueue", "broker"},
		{"outbox", "broker"},
		{"requestreply", "broker"},
		{"reminders", "broker"},
		{"watermill-router", "broker"},
		{"migrate", "rabbit"},
		{"migrate", "kafka"},
	} {
		env := strings.ToUpper(c.flag)
		run := func(extra ...string) (string, error) {
			cmd := exec.Command(filepath.Join(bin, c.example), append([]string{"-timeout", "10s"}, extra...)...)
			cmd.Env = append(os.Environ(), env+"=fromenv://"+c.example)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		// The environment is the default...
		out, err := run()
		if err == nil || !strings.Contains(out, `"fromenv"`) {
			t.Errorf("%s with %s=fromenv://…: err %v, want a failure naming scheme \"fromenv\":\n%s", c.example, env, err, out)
		}
		// ...and the flag wins over it.
		out, err = run("-"+c.flag, "fromflag://"+c.example)
		if err == nil || !strings.Contains(out, `"fromflag"`) || strings.Contains(out, `"fromenv"`) {
			t.Errorf("%s -%s fromflag://… with %s set: err %v, want a failure naming scheme \"fromflag\" only:\n%s", c.example, c.flag, env, err, out)
		}
		// -h says so.
		help, _ := run("-h")
		if !strings.Contains(help, "-"+c.flag) || !strings.Contains(help, "default $"+env) {
			t.Errorf("%s -h does not document -%s with the default $%s:\n%s", c.example, c.flag, env, help)
		}
	}
}
