package relaytest

import (
	"strings"
	"testing"
)

func TestCompareRounds(t *testing.T) {
	var order []string
	res := testing.Benchmark(func(b *testing.B) {
		order = order[:0]
		relayRates, rawRates := []float64{10, 20, 30}, []float64{20, 10, 60}
		side := func(name string, rates []float64, cpu float64) func(int) Round {
			i := 0
			return func(int) Round {
				order = append(order, name)
				i++
				return Round{Rate: rates[i-1], CPU: cpu}
			}
		}
		CompareRounds(b, 3, side("relay", relayRates, 1.5), side("raw", rawRates, 0.5))
	})
	if got, want := strings.Join(order, " "), "relay raw raw relay relay raw"; got != want {
		t.Fatalf("sides ran %q, want %q (alternating who goes first)", got, want)
	}
	want := map[string]float64{
		"relay-msg/s": 20, "raw-msg/s": 20,
		"ratio":            1,   // 20 / 20
		"ratio-paired":     0.5, // median of 0.5, 2, 0.5
		"relay-cpu-µs/msg": 1.5, "raw-cpu-µs/msg": 0.5,
	}
	for k, v := range want {
		if got, ok := res.Extra[k]; !ok || got != v {
			t.Errorf("%s = %v (reported %v), want %v", k, got, ok, v)
		}
	}

	res = testing.Benchmark(func(b *testing.B) {
		CompareRates(b, 1, func(*testing.B, int) float64 { return 3 }, func(*testing.B, int) float64 { return 4 })
	})
	if res.Extra["ratio"] != 0.75 {
		t.Errorf("CompareRates ratio = %v, want 0.75", res.Extra["ratio"])
	}
	if _, ok := res.Extra["relay-cpu-µs/msg"]; ok {
		t.Error("CPU reported for sides that do not measure it")
	}
}
