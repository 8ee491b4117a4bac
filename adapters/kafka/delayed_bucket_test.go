package kafka

import (
	"testing"
	"time"
)

// A record goes to the largest bucket not above the time it has left, so
// it never waits in a bucket past its due time.
func TestBucketFor(t *testing.T) {
	for _, c := range []struct{ left, want time.Duration }{
		{time.Millisecond, 0}, {999 * time.Millisecond, 0}, {time.Second, time.Second}, {9999 * time.Millisecond, time.Second},
		{10 * time.Second, 10 * time.Second}, {59 * time.Second, 10 * time.Second}, {time.Minute, time.Minute},
		{90 * time.Minute, time.Hour}, {10 * time.Hour, 10 * time.Hour}, {1000 * time.Hour, 10 * time.Hour},
	} {
		if got := bucketFor(c.left); got != c.want {
			t.Errorf("bucketFor(%v) = %v, want %v", c.left, got, c.want)
		}
	}
}
