package httppoll

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"syscall"
)

// errClass is the kind of a poll's failure, for RecordChanges: two results
// of a session with the same status and class are the same outcome.
type errClass uint8

// Classes of failures.
const (
	classOK errClass = iota
	classServer
	classStatus
	classTimeout
	classCanceled
	classRefused
	classReset
	classDNS
	classTLS
	classProfile
	classRedirect
	classOther
)

// classify returns the class of a poll's error.
func classify(err error) errClass {
	if err == nil {
		// Before the targets below, which errors.As makes escape: a
		// successful poll allocates none of them.
		return classOK
	}
	return classifyFailure(err)
}

// classifyFailure classifies a non-nil error for classify.
func classifyFailure(err error) errClass {
	var se *StatusError
	var pe *ProfileError
	var re *RedirectError
	var ne net.Error
	var dns *net.DNSError
	var rh tls.RecordHeaderError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	switch {
	case errors.As(err, &pe):
		return classProfile
	case errors.As(err, &re):
		return classRedirect
	case errors.As(err, &se) && se.Code >= 500:
		return classServer
	case errors.As(err, &se):
		return classStatus
	case errors.Is(err, context.Canceled):
		return classCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return classTimeout
	case errors.As(err, &dns):
		return classDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return classRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return classReset
	case errors.As(err, &rh), errors.As(err, &cv), errors.As(err, &ua), errors.As(err, &hn):
		return classTLS
	}
	return classOther
}

// String names the class as State.Error does: "" for classOK.
func (c errClass) String() string {
	switch c {
	case classOK:
		return ""
	case classServer:
		return "server"
	case classStatus:
		return "status"
	case classTimeout:
		return "timeout"
	case classCanceled:
		return "cancelled"
	case classRefused:
		return "refused"
	case classReset:
		return "reset"
	case classDNS:
		return "dns"
	case classTLS:
		return "tls"
	case classProfile:
		return "profile"
	case classRedirect:
		return "redirect"
	}
	return "other"
}
