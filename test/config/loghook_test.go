package config

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
)

// smtpSink is a minimal SMTP server that keeps the messages it receives.
type smtpSink struct {
	ln   net.Listener
	mu   sync.Mutex
	msgs []string
}

func newSMTPSink(t *testing.T) *smtpSink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &smtpSink{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.session(c)
		}
	}()
	return s
}

func (s *smtpSink) session(c net.Conn) {
	defer c.Close()
	rd := bufio.NewReader(c)
	say := func(line string) { fmt.Fprintf(c, "%s\r\n", line) }
	say("220 sink ready")
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return
		}
		cmd := strings.ToUpper(strings.TrimSpace(line))
		switch {
		case strings.HasPrefix(cmd, "EHLO"), strings.HasPrefix(cmd, "HELO"):
			say("250 sink")
		case strings.HasPrefix(cmd, "DATA"):
			say("354 go on")
			var msg strings.Builder
			for {
				l, err := rd.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
				msg.WriteString(l)
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, msg.String())
			s.mu.Unlock()
			say("250 kept")
		case strings.HasPrefix(cmd, "QUIT"):
			say("221 bye")
			return
		default:
			say("250 ok")
		}
	}
}

func (s *smtpSink) messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.msgs...)
}

// log.hooks of type mail mail the records of their levels, as
// distribution's do: here the warning a deprecated key causes at start-up.
func TestLogHookMail(t *testing.T) {
	sink := newSMTPSink(t)
	serve(t, fmt.Sprintf(`loglevel: info
log:
  level: info
  hooks:
    - type: mail
      levels: [warning]
      options:
        smtp:
          addr: %s
        from: registry@example.com
        to: [ops@example.com]
    - type: mail
      disabled: true
      levels: [info]
      options:
        smtp:
          addr: %s
        from: never@example.com
        to: [never@example.com]
`, sink.ln.Addr(), sink.ln.Addr()))
	eventually(t, "the warning mailed", func() (bool, string) {
		for _, m := range sink.messages() {
			if strings.Contains(m, "Subject: [warning] 127.0.0.1: config: loglevel is deprecated") &&
				strings.Contains(m, "To: ops@example.com") && strings.Contains(m, "From: registry@example.com") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%q", sink.messages())
	})
	for _, m := range sink.messages() {
		if strings.Contains(m, "never@example.com") || !strings.Contains(m, "[warning]") {
			t.Errorf("mailed what no enabled hook asked for: %q", m)
		}
	}
}
