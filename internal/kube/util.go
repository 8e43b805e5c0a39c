package kube

import (
	"crypto/rand"
	"encoding/hex"
	"net"
)

// randomID is 8 hex digits.
func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ipList parses addresses.
func ipList(addrs ...string) []net.IP {
	ips := make([]net.IP, 0, len(addrs))
	for _, a := range addrs {
		ips = append(ips, net.ParseIP(a))
	}
	return ips
}
