package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// GoawsPackage is the emulator's main package. go.mod pins it (as a tool)
// to v0.5.4, the first release line that speaks the JSON protocol of
// current SQS clients; `@latest` resolves to a 2019 release that does not.
const GoawsPackage = "github.com/Admiral-Piett/goaws/app/cmd"

// DefaultAWSRegion is the region tests use unless RELAY_TEST_AWS_REGION
// says otherwise.
const DefaultAWSRegion = "us-east-1"

// GoawsAccount is the account ID the emulator puts in ARNs.
const GoawsAccount = "100010001000"

// SQSService is the SQS/SNS service the sqs adapter's tests run against.
//
// By default StartSQS builds goaws from the module cache and runs it as a
// subprocess on a free local port. RELAY_TEST_SQS_ENDPOINT points the same
// tests elsewhere: a URL (another emulator, e.g. http://localhost:4566 for
// LocalStack) or "aws" for AWS's own endpoints, with the region from
// RELAY_TEST_AWS_REGION and credentials from the default AWS chain.
type SQSService struct {
	// Endpoint is the base URL for both SQS and SNS; "" means AWS's own.
	Endpoint string
	Region   string
	// Emulated is true when the service is goaws started by StartSQS; its
	// known deviations from AWS are then expected by the tests.
	Emulated bool
	// Err says why the service is unavailable (nil when it is usable).
	Err error

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	dir  string
	port string
	bin  string
}

// StartSQS returns the service the tests use, starting goaws when no
// external one is configured. Call it once from TestMain and Stop it after
// m.Run; tests call Need first.
func StartSQS() *SQSService {
	s := &SQSService{Region: URL("RELAY_TEST_AWS_REGION", DefaultAWSRegion)}
	if ep := os.Getenv("RELAY_TEST_SQS_ENDPOINT"); ep != "" {
		if ep != "aws" {
			s.Endpoint = ep
			if err := reachableHTTP(ep); err != nil {
				s.Err = fmt.Errorf("RELAY_TEST_SQS_ENDPOINT=%s unreachable: %w", ep, err)
			}
		}
		return s
	}
	s.Emulated = true
	if err := s.startGoaws(); err != nil {
		s.Err = fmt.Errorf("starting goaws: %w", err)
		s.Stop()
	}
	return s
}

// Need fails the test under CI (or RELAY_REQUIRE_BROKERS=1) when the
// service is unavailable, and skips it with the reason otherwise.
func (s *SQSService) Need(t testing.TB) {
	t.Helper()
	if s == nil {
		t.Fatal("testenv: StartSQS was not called from TestMain")
		return
	}
	if s.Err == nil {
		return
	}
	if Required() {
		t.Fatalf("SQS/SNS is required but unavailable (set RELAY_TEST_SQS_ENDPOINT): %v", s.Err)
	}
	t.Skipf("SKIP: SQS/SNS unavailable (set RELAY_TEST_SQS_ENDPOINT, or make the module cache hold goaws v0.5.4 with `go mod download`): %v", s.Err)
}

func (s *SQSService) startGoaws() error {
	dir, err := os.MkdirTemp("", "relay-goaws-")
	if err != nil {
		return err
	}
	s.dir = dir
	s.bin = filepath.Join(dir, "goaws")
	build := exec.Command("go", "build", "-o", s.bin, GoawsPackage)
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v: %s", GoawsPackage, err, bytes.TrimSpace(out))
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	s.port = port
	cfg := fmt.Sprintf(`Local:
  Host: 127.0.0.1
  Port: %s
  Region: %s
  AccountId: "%s"
  LogToFile: false
  EnableDuplicates: false
  QueueAttributeDefaults:
    VisibilityTimeout: 30
    ReceiveMessageWaitTimeSeconds: 0
    MaximumMessageSize: 1048576
`, port, s.Region, GoawsAccount)
	if err := os.WriteFile(filepath.Join(dir, "goaws.yaml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	s.Endpoint = "http://127.0.0.1:" + port
	return s.run()
}

// run starts the built emulator and waits until it answers /health.
func (s *SQSService) run() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "goaws.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "-config", filepath.Join(s.dir, "goaws.yaml"), "-loglevel", "warn", "Local")
	cmd.Stdout, cmd.Stderr = logf, logf
	dieWithParent(cmd) // never outlive the test binary
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("goaws exited at start: %s", s.logTail())
		default:
		}
		if healthy(s.Endpoint) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("goaws not healthy after 20s: %s", s.logTail())
}

func healthy(endpoint string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/health", nil)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (s *SQSService) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "goaws.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Restart kills the emulator and starts it again on the same port; it
// returns once the emulator answers. goaws keeps its state in memory, so
// every queue, topic and subscription is gone afterwards (unlike AWS,
// where a restart of the service loses nothing). Only for Emulated.
func (s *SQSService) Restart() error {
	if !s.Emulated {
		return errors.New("testenv: only the emulator started by StartSQS can be restarted")
	}
	s.kill()
	return s.run()
}

func (s *SQSService) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Stop ends the emulator (if one was started) and removes its files.
// Idempotent.
func (s *SQSService) Stop() {
	s.kill()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// reachableHTTP dials the host of an http(s) URL, default ports included.
func reachableHTTP(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	c, err := net.DialTimeout("tcp", host, 3*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}
