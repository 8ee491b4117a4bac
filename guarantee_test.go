package relay

import "testing"

func TestGuaranteeRoundTrip(t *testing.T) {
	for _, g := range []Guarantee{AtLeastOnce, AtMostOnce, ExactlyOnce} {
		b, err := g.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Guarantee
		if err := back.UnmarshalText(b); err != nil || back != g {
			t.Fatalf("%s: got %v, %v", b, back, err)
		}
	}
	if g, err := ParseGuarantee(""); err != nil || g != AtLeastOnce {
		t.Fatalf("empty: %v, %v; want the default at-least-once", g, err)
	}
	if _, err := ParseGuarantee("once"); err == nil {
		t.Fatal("ParseGuarantee(once) succeeded")
	}
	if _, err := Guarantee(7).MarshalText(); err == nil {
		t.Fatal("MarshalText of an invalid value succeeded")
	}
}
