// Package tlsconf holds the TLS client options that adapters share: the
// URL parameters tls_ca, tls_cert, tls_key, tls_server_name and
// tls_insecure, their validation, and the *tls.Config built from them.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/go-relay/relay/driver/urlopt"
)

// URL parameter names.
const (
	ParamCA         = "tls_ca"
	ParamCert       = "tls_cert"
	ParamKey        = "tls_key"
	ParamServerName = "tls_server_name"
	ParamInsecure   = "tls_insecure"
)

// Params lists every URL parameter Read reads, in documentation order.
var Params = []string{ParamCA, ParamCert, ParamKey, ParamServerName, ParamInsecure}

// Files are the file-based TLS client options.
type Files struct {
	// CAFile is a PEM bundle of CAs to trust instead of the system pool
	// (tls_ca=). Empty: the system pool.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key for
	// mutual TLS (tls_cert=, tls_key=); both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name verified in the server certificate
	// (tls_server_name=).
	ServerName string
	// Insecure skips verification of the server certificate
	// (tls_insecure=true). For tests only.
	Insecure bool
}

// Read reads the tls_* parameters from p (malformed values are recorded
// in p as usual). It does not validate; call Check.
func Read(p *urlopt.Params) Files {
	return Files{
		CAFile:     p.String(ParamCA, ""),
		CertFile:   p.String(ParamCert, ""),
		KeyFile:    p.String(ParamKey, ""),
		ServerName: p.String(ParamServerName, ""),
		Insecure:   p.Bool(ParamInsecure, false),
	}
}

// Set reports whether any option differs from its zero value.
func (f Files) Set() bool { return f != Files{} }

// FailFunc records a problem with a parameter; (*urlopt.Params).Fail is one.
type FailFunc func(param, format string, args ...any)

// Check reports, through fail, the problems visible without touching the
// file system: tls_cert and tls_key must be given together.
func (f Files) Check(fail FailFunc) {
	if (f.CertFile == "") != (f.KeyFile == "") {
		fail(ParamCert, "tls_cert and tls_key must be given together")
	}
}

// Build reads the files and returns the client configuration: TLS 1.2 or
// later, the CA file's certificates as roots (the system pool when there
// is none), the client certificate, ServerName (defaultServerName when
// empty; an empty result lets the dialer use the host it dials) and
// Insecure. Every problem, Check's included, is reported through fail
// naming its parameter; the returned config is then incomplete and must
// not be used. Build does not keep references to f.
func (f Files) Build(defaultServerName string, fail FailFunc) *tls.Config {
	f.Check(fail)
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: defaultServerName, InsecureSkipVerify: f.Insecure} //nolint:gosec // opt-in, documented as tests only
	if f.ServerName != "" {
		tc.ServerName = f.ServerName
	}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		switch {
		case err != nil:
			fail(ParamCA, "%v", err)
		default:
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				fail(ParamCA, "no PEM certificate in %s", f.CAFile)
			}
			tc.RootCAs = pool
		}
	}
	if f.CertFile != "" && f.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			fail(ParamCert, "%v", err)
		} else {
			tc.Certificates = []tls.Certificate{cert}
		}
	}
	return tc
}

// Config is Build returning its problems as one error (each "param:
// reason", joined), for callers that build when connecting rather than
// while parsing a URL.
func (f Files) Config(defaultServerName string) (*tls.Config, error) {
	var errs []error
	tc := f.Build(defaultServerName, func(param, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", param, fmt.Sprintf(format, args...)))
	})
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return tc, nil
}
