package metrics

import "github.com/prometheus/client_golang/prometheus"

// Notifications counts event deliveries to webhook endpoints
// (notify.Metrics).
type Notifications struct {
	sent    *prometheus.CounterVec
	failed  *prometheus.CounterVec
	dropped *prometheus.CounterVec
	pending *prometheus.GaugeVec
}

// Notifications registers the notification metrics on m's registry; call
// it once, when notifications are configured.
func (m *Metrics) Notifications() *Notifications {
	f := factory{m.reg}
	n := &Notifications{
		sent: f.counterVec("notifications_sent_total",
			"Events delivered to a notification endpoint (answered 2xx or 3xx), by endpoint.", "endpoint"),
		failed: f.counterVec("notifications_failures_total",
			"Failed deliveries to a notification endpoint (error, timeout or a status outside 2xx and 3xx), by endpoint; the events stay queued and are tried again.", "endpoint"),
		dropped: f.counterVec("notifications_dropped_total",
			"Undelivered events dropped because an endpoint's queue was full (notifications.queue.maxevents), oldest first, by endpoint.", "endpoint"),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "notifications_pending",
			Help: "Events queued on disk for an endpoint and not yet delivered, by endpoint."}, []string{"endpoint"}),
	}
	m.reg.MustRegister(n.pending)
	return n
}

// NotifySent counts events delivered to endpoint.
func (n *Notifications) NotifySent(endpoint string, events int) {
	n.sent.WithLabelValues(endpoint).Add(float64(events))
}

// NotifyFailed counts a failed delivery to endpoint.
func (n *Notifications) NotifyFailed(endpoint string) { n.failed.WithLabelValues(endpoint).Inc() }

// NotifyDropped counts events a full queue dropped.
func (n *Notifications) NotifyDropped(endpoint string, events int) {
	n.dropped.WithLabelValues(endpoint).Add(float64(events))
}

// NotifyPending sets the events queued for endpoint.
func (n *Notifications) NotifyPending(endpoint string, events int) {
	n.pending.WithLabelValues(endpoint).Set(float64(events))
}
