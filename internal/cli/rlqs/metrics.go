package rlqs

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smoothrate/ratelimit/rlqs"
)

// serverMetrics is the prometheus.Collector of rlqs's page: the server's
// counters and gauges (rlqs.Server.Stats), read when the page is scraped,
// and the configurations that failed to load.
type serverMetrics struct {
	stats       func() rlqs.Stats
	loadsFailed atomic.Uint64
}

var (
	streamsDesc = prometheus.NewDesc("ratelimit_rlqs_streams",
		"Open streams: one per Envoy connected.", nil, nil)
	bucketsDesc = prometheus.NewDesc("ratelimit_rlqs_buckets",
		"Bucket ids the server tracks.", nil, nil)
	subscriptionsDesc = prometheus.NewDesc("ratelimit_rlqs_subscriptions",
		"(Envoy, bucket id) pairs reported: the assignments the server keeps.", nil, nil)
	reportMessagesDesc = prometheus.NewDesc("ratelimit_rlqs_report_messages_total",
		"Usage report messages received (each reports one or more buckets).", nil, nil)
	reportsDesc = prometheus.NewDesc("ratelimit_rlqs_bucket_reports_total",
		"Bucket usages reported, by result: accepted, or refused (a bucket id empty or too large).",
		[]string{"result"}, nil)
	actionsDesc = prometheus.NewDesc("ratelimit_rlqs_actions_total",
		"Bucket actions sent, by kind: assignment (a share that changed what an Envoy runs), renewal (the same again, extending its time to live), expiration (time to live 0, on shutdown), abandon.",
		[]string{"action"}, nil)
	streamsRefusedDesc = prometheus.NewDesc("ratelimit_rlqs_streams_refused_total",
		"Streams refused, by reason: unknown_domain (NOT_FOUND), no_domain (INVALID_ARGUMENT).",
		[]string{"reason"}, nil)
	storeCallsDesc = prometheus.NewDesc("ratelimit_rlqs_store_calls_total",
		"Claims made to Redis (--redis).", nil, nil)
	storeErrorsDesc = prometheus.NewDesc("ratelimit_rlqs_store_errors_total",
		"Claims to Redis that failed, by cause: unavailable (an outage: the bucket keeps its last shares), misconfigured (Redis set up wrong).",
		[]string{"cause"}, nil)
	configLoadsDesc = prometheus.NewDesc("ratelimit_rlqs_config_loads_total",
		"Configurations loaded, by result: success (the one at start included), error (the previous one kept).",
		[]string{"result"}, nil)
)

var allDescs = []*prometheus.Desc{streamsDesc, bucketsDesc, subscriptionsDesc, reportMessagesDesc, reportsDesc,
	actionsDesc, streamsRefusedDesc, storeCallsDesc, storeErrorsDesc, configLoadsDesc}

// Describe sends the families' descriptions.
func (m *serverMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect reads the server's counters once and sends them.
func (m *serverMetrics) Collect(ch chan<- prometheus.Metric) {
	st := m.stats()
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	counter := func(d *prometheus.Desc, v uint64, labelValues ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labelValues...)
	}
	gauge(streamsDesc, st.Streams)
	gauge(bucketsDesc, st.Buckets)
	gauge(subscriptionsDesc, st.Subscriptions)
	counter(reportMessagesDesc, st.ReportMessages)
	counter(reportsDesc, st.Reports-st.InvalidReports, "accepted")
	counter(reportsDesc, st.InvalidReports, "refused")
	counter(actionsDesc, st.Assignments, "assignment")
	counter(actionsDesc, st.Renewals, "renewal")
	counter(actionsDesc, st.Expirations, "expiration")
	counter(actionsDesc, st.Abandons, "abandon")
	counter(streamsRefusedDesc, st.UnknownDomains, "unknown_domain")
	counter(streamsRefusedDesc, st.InvalidStreams, "no_domain")
	counter(storeCallsDesc, st.StoreCalls)
	counter(storeErrorsDesc, st.StoreErrors-st.StoreMisconfigured, "unavailable")
	counter(storeErrorsDesc, st.StoreMisconfigured, "misconfigured")
	counter(configLoadsDesc, st.ConfigLoads, "success")
	counter(configLoadsDesc, m.loadsFailed.Load(), "error")
}
