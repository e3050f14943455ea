package brokers

import (
	"crypto/tls"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/brokers/devcerts"
)

type testPKI struct{ *devcerts.PKI }

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	p, err := devcerts.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{p}
}

func (p testPKI) ServerTLS(t *testing.T) *tls.Config {
	t.Helper()
	c, err := p.PKI.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
