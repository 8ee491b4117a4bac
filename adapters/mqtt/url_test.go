package mqtt_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-relay/relay"
)

func TestURLBothSidesOneParser(t *testing.T) {
	full := "mqtt://u:p@127.0.0.1:1883?group=g&instance=host-1&inflight=8&inflight_bytes=1MiB" +
		"&connect_timeout=2s&keep_alive=10s&max_bytes=1MiB&retain=true&envelope=never"
	if err := relay.CheckURL(full); err != nil {
		t.Errorf("CheckURL with the subscriber's parameters: %v", err)
	}
	if err := relay.CheckSubscriberURL(full); err != nil {
		t.Errorf("CheckSubscriberURL: %v", err)
	}
	if err := relay.CheckURL("mqtts://broker?tls_insecure=true"); err != nil {
		t.Errorf("CheckURL of mqtts:// with tls_insecure: %v", err)
	}
	var ue *relay.URLError
	if err := relay.CheckSubscriberURL("mqtt://127.0.0.1:1883"); !errors.As(err, &ue) || ue.Param != "group" {
		t.Errorf("CheckSubscriberURL without group = %v, want a *URLError naming group", err)
	}
	for param, raw := range map[string]string{
		"bogus":           "mqtt://h?bogus=1",
		"group":           "mqtt://h?group=a/b",
		"instance":        "mqtt://h?group=g&instance=a%2Bb",
		"inflight":        "mqtt://h?inflight=0",
		"keep_alive":      "mqtt://h?keep_alive=10ms",
		"connect_timeout": "mqtt://h?connect_timeout=0s",
		"max_bytes":       "mqtt://h?max_bytes=1GiB",
		"envelope":        "mqtt://h?envelope=sometimes",
		"tls_insecure":    "mqtt://h?tls_insecure=true",
		"path":            "mqtt://h/topic",
	} {
		err := relay.CheckURL(raw)
		if !errors.As(err, &ue) {
			t.Errorf("%s: CheckURL = %v, want a *URLError", raw, err)
			continue
		}
		if !strings.Contains(err.Error(), `"`+param+`"`) {
			t.Errorf("%s: error %q does not name %q", raw, err, param)
		}
	}
}

func TestURLSecretsRedacted(t *testing.T) {
	err := relay.CheckURL("mqtt://alice:s3cr3t@h?bogus=1")
	if err == nil {
		t.Fatal("no error for an unknown parameter")
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("error %q shows the password", err)
	}
}
