package kube

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// linkExists reports whether the host has a network interface name.
func linkExists(name string) bool {
	if name == "" {
		return false
	}
	_, err := net.InterfaceByName(name)
	return err == nil
}

// deleteLink deletes the network interface name (the CNI bridge, which
// the bridge plugin creates and never removes), when it exists, with an
// RTM_DELLINK request over rtnetlink: no iproute2 needed.
func deleteLink(name string) error {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return nil // gone already
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	if err := unix.Sendto(fd, delLinkRequest(int32(ifc.Index)), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	return readAck(fd)
}

// delLinkRequest is an RTM_DELLINK message for the interface index that
// asks for an acknowledgement.
func delLinkRequest(index int32) []byte {
	hdr := unix.NlMsghdr{
		Len:   uint32(unix.SizeofNlMsghdr + unix.SizeofIfInfomsg),
		Type:  unix.RTM_DELLINK,
		Flags: unix.NLM_F_REQUEST | unix.NLM_F_ACK,
		Seq:   1,
	}
	info := unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: index}
	b := make([]byte, 0, hdr.Len)
	b = append(b, unsafe.Slice((*byte)(unsafe.Pointer(&hdr)), unix.SizeofNlMsghdr)...)
	return append(b, unsafe.Slice((*byte)(unsafe.Pointer(&info)), unix.SizeofIfInfomsg)...)
}

// readAck reads the kernel's answer to one request: an NLMSG_ERROR whose
// error is 0 on success.
func readAck(fd int) error {
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
			continue
		}
		if code := *(*int32)(unsafe.Pointer(&m.Data[0])); code != 0 {
			return fmt.Errorf("RTM_DELLINK: %w", unix.Errno(-code))
		}
		return nil
	}
	return errors.New("RTM_DELLINK: no acknowledgement")
}
