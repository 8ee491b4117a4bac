package bridge_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"
)

// machineBusy returns the CPU time all of the machine's cores have spent
// busy since boot (the non-idle columns of /proc/stat's first line), so
// that the difference over a measurement counts the brokers' processes,
// the in-process kfake and goaws, and the client alike. It is 0 where
// /proc/stat is not readable; the CPU figures are then 0 too.
func machineBusy() time.Duration {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0
	}
	var ticks int64
	for i, v := range fields[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest time is already counted in user
			break
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	// USER_HZ is 100 on every Linux configuration Go supports.
	return time.Duration(ticks) * (time.Second / 100)
}

// perMessage is busy CPU time per message in µs.
func perMessage(busy time.Duration, msgs int) float64 {
	return float64(busy) / float64(time.Microsecond) / float64(msgs)
}
