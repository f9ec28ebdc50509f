// Package logmail is distribution's mail log hook (log.hooks of type
// mail): every log record at one of the configured levels is mailed over
// SMTP, with the level, the SMTP host and the message as subject and the
// record's attributes in the body. Mail is sent in the background, a few
// at a time; a record that finds them all busy is not mailed, so that
// logging never waits for a mail server.
package logmail

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/smtp"
	"slices"
	"strings"
)

// Options configure one hook.
type Options struct {
	// Levels are the levels that are mailed.
	Levels []slog.Level
	// Addr is the SMTP server's host:port; Username and Password, when
	// set, authenticate (PLAIN, over TLS or to localhost only).
	Addr, Username, Password string
	// Insecure accepts the server's certificate unverified.
	Insecure bool
	From     string
	To       []string
	// OnError receives delivery failures (nil: ignored).
	OnError func(error)
}

// maxInFlight bounds the mails being sent at once.
const maxInFlight = 4

// Handler passes every record to next and mails those at Options.Levels.
type Handler struct {
	next  slog.Handler
	o     *Options
	slots chan struct{}
	attrs []slog.Attr
}

// New wraps next.
func New(next slog.Handler, o Options) *Handler {
	return &Handler{next: next, o: &o, slots: make(chan struct{}, maxInFlight)}
}

// Enabled is next's: as with distribution's hooks, a record below the log
// level is neither logged nor mailed.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

// Handle logs r and mails it when its level is one of the hook's.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if slices.Contains(h.o.Levels, r.Level) {
		subject, body := h.message(r)
		select {
		case h.slots <- struct{}{}:
			// A goroutine per mail, slots bounding them: logging must
			// never wait on a mail server, and a mail dropped when all
			// slots are busy is better than a log call that blocks.
			go func() {
				defer func() { <-h.slots }()
				if err := send(h.o, subject, body); err != nil && h.o.OnError != nil {
					h.o.OnError(err)
				}
			}()
		default:
		}
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(attrs)
	c.attrs = append(slices.Clone(h.attrs), attrs...)
	return &c
}

// WithGroup implements slog.Handler; the mail's attributes stay flat.
func (h *Handler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// message is distribution's subject ("[level] smtp-host: message") and a
// body of the message and one "key: value" line per attribute.
func (h *Handler) message(r slog.Record) (subject, body string) {
	host, _, _ := net.SplitHostPort(h.o.Addr)
	level := strings.ToLower(r.Level.String())
	if r.Level == slog.LevelWarn {
		level = "warning" // logrus's name, which distribution's subjects carry
	}
	subject = fmt.Sprintf("[%s] %s: %s", level, host, strings.ReplaceAll(r.Message, "\n", " "))
	var b strings.Builder
	b.WriteString(r.Message + "\n\n")
	add := func(a slog.Attr) bool {
		fmt.Fprintf(&b, "%s: %v\n", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	return subject, b.String()
}

// send delivers one mail: STARTTLS when the server offers it, PLAIN auth
// when a username is set.
func send(o *Options, subject, body string) error {
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return fmt.Errorf("log hook: smtp addr %q: %w", o.Addr, err)
	}
	c, err := smtp.Dial(o.Addr)
	if err != nil {
		return fmt.Errorf("log hook: %w", err)
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); ok {
		if err := c.StartTLS(&tls.Config{ServerName: host, InsecureSkipVerify: o.Insecure}); err != nil {
			return fmt.Errorf("log hook: starttls: %w", err)
		}
	}
	if o.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", o.Username, o.Password, host)); err != nil {
			return fmt.Errorf("log hook: auth: %w", err)
		}
	}
	if err := c.Mail(o.From); err != nil {
		return fmt.Errorf("log hook: %w", err)
	}
	for _, to := range o.To {
		if err := c.Rcpt(to); err != nil {
			return fmt.Errorf("log hook: %w", err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("log hook: %w", err)
	}
	msg := "To: " + strings.Join(o.To, ", ") + "\r\nFrom: " + o.From + "\r\nSubject: " + subject +
		"\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n" + strings.ReplaceAll(body, "\n", "\r\n")
	if _, err := w.Write([]byte(msg)); err != nil {
		return fmt.Errorf("log hook: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("log hook: %w", err)
	}
	return c.Quit()
}
