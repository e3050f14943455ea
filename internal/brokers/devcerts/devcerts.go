// Package devcerts writes a throwaway certificate authority with a server
// certificate for 127.0.0.1/localhost and a client certificate, for tests
// and local trials of the brokers' TLS. Never for production: the keys are
// unprotected files and the certificates last a day.
package devcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI names the PEM files Generate wrote.
type PKI struct {
	CAFile, ServerCert, ServerKey, ClientCert, ClientKey string
	// OtherCAFile is a second CA that signed nothing here (a client
	// trusting only it must refuse the server).
	OtherCAFile string
	pool        *x509.CertPool
}

// Generate writes the files under dir.
func Generate(dir string) (*PKI, error) {
	caKey, caCert, caDER, err := selfSigned("switchyard dev CA")
	if err != nil {
		return nil, err
	}
	_, _, otherDER, err := selfSigned("other dev CA")
	if err != nil {
		return nil, err
	}
	p := &PKI{
		CAFile: filepath.Join(dir, "ca.pem"), OtherCAFile: filepath.Join(dir, "other-ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		pool: x509.NewCertPool(),
	}
	p.pool.AddCert(caCert)
	if err := writePEM(p.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	if err := writePEM(p.OtherCAFile, "CERTIFICATE", otherDER); err != nil {
		return nil, err
	}
	if err := issue(caKey, caCert, p.ServerCert, p.ServerKey, x509.ExtKeyUsageServerAuth, true); err != nil {
		return nil, err
	}
	if err := issue(caKey, caCert, p.ClientCert, p.ClientKey, x509.ExtKeyUsageClientAuth, false); err != nil {
		return nil, err
	}
	return p, nil
}

// ServerTLS is a server configuration with the server certificate that
// requires and verifies client certificates against the CA.
func (p *PKI) ServerTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		return nil, fmt.Errorf("loading server certificate: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert}, nil
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n, nil
}

func issue(caKey *ecdsa.PrivateKey, ca *x509.Certificate, certFile, keyFile string, usage x509.ExtKeyUsage, server bool) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: "switchyard"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	if server {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("issuing certificate: %w", err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding key: %w", err)
	}
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyFile, "PRIVATE KEY", kb)
}

func selfSigned(name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generating CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parsing CA: %w", err)
	}
	return key, cert, der, nil
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
