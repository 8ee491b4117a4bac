package testenv

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// CheckEnvFlag checks the way every example takes a URL: the string flag
// -name that define makes on a flag set has the environment variable of
// the same name in capitals as its default, def when that is unset or
// empty, the flag wins over the variable, and its usage says so ("default
// $NAME"). It sets the variable, so the test must not be parallel.
func CheckEnvFlag(t *testing.T, name, def string, define func(*flag.FlagSet) *string) {
	t.Helper()
	env := strings.ToUpper(name)
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"", nil, def},
		{"fromenv://x", nil, "fromenv://x"},
		{"fromenv://x", []string{"-" + name, "fromflag://y"}, "fromflag://y"},
	} {
		t.Setenv(env, c.env)
		fs := flag.NewFlagSet("example", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		got := define(fs)
		if err := fs.Parse(c.args); err != nil || *got != c.want {
			t.Errorf("-%s with %s=%q and arguments %q: %q (%v), want %q", name, env, c.env, c.args, *got, err, c.want)
		}
		if f := fs.Lookup(name); f == nil || !strings.Contains(f.Usage, "default $"+env) {
			t.Errorf("the usage of -%s does not say its default is $%s", name, env)
		}
	}
}
