package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a throw-away certificate authority for TLS tests, generated at
// test time (no private key is ever committed). Files are PEM.
type PKI struct {
	Dir string
	// CA is the CA certificate file.
	CA string

	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

// NewPKI creates a CA under a new temporary directory.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ckfrelay test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{Dir: t.TempDir(), caCert: cert, caKey: key, serial: 1}
	p.CA = p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

// Issue signs a certificate for name, valid as a server for localhost,
// 127.0.0.1 and name, and as a client. It returns the certificate and key
// files (<name>.pem, <name>-key.pem).
func (p *PKI) Issue(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost", name},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", kb)
}

func (p *PKI) write(t testing.TB, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.Dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
