package rlqs

import "sync/atomic"

// Stats are a Server's counters and gauges, for metrics: the command
// exposes them with a Prometheus client.
type Stats struct {
	// Streams is the number of open streams (one per Envoy).
	Streams int
	// Buckets is the number of bucket ids the server tracks, and
	// Subscriptions the (stream, bucket id) pairs reported.
	Buckets, Subscriptions int

	// ReportMessages counts the usage report messages received, Reports
	// the bucket usages in them, InvalidReports those refused (a bucket
	// id empty or too large: MaxBucketIDKeys, MaxBucketIDBytes; or a new
	// bucket of a stream that holds WithMaxBucketsPerStream already).
	ReportMessages, Reports, InvalidReports uint64
	// Assignments counts the assignments sent that changed what a
	// client runs (a token bucket, a blanket rule); Renewals the same
	// assignment sent again, which extends its time to live (once per
	// report); Expirations the assignments sent with a time to live of 0
	// (Shutdown); Abandons the abandon actions (a bucket idle or no
	// longer reported).
	Assignments, Renewals, Expirations, Abandons uint64
	// UnknownDomains counts the streams refused for a domain the
	// configuration does not have (NOT_FOUND), InvalidStreams those
	// refused for no domain (INVALID_ARGUMENT).
	UnknownDomains, InvalidStreams uint64
	// StoreCalls counts the calls to the store, StoreErrors those that
	// failed, StoreMisconfigured those among them that failed because
	// Redis is set up wrong (ErrMisconfigured).
	StoreCalls, StoreErrors, StoreMisconfigured uint64
	// ConfigLoads counts the configurations applied (New and SetConfig).
	ConfigLoads uint64
}

// counters are the Server's cumulative counts.
type counters struct {
	reportMessages, reports, invalidReports      atomic.Uint64
	assignments, renewals, expirations, abandons atomic.Uint64
	unknownDomains, invalidStreams               atomic.Uint64
	storeCalls, storeErrors, storeMisconfigured  atomic.Uint64
	configLoads                                  atomic.Uint64
}

// Stats returns the server's counters and gauges now.
func (s *Server) Stats() Stats {
	st := Stats{
		ReportMessages: s.stats.reportMessages.Load(), Reports: s.stats.reports.Load(),
		InvalidReports: s.stats.invalidReports.Load(),
		Assignments:    s.stats.assignments.Load(), Renewals: s.stats.renewals.Load(),
		Expirations: s.stats.expirations.Load(), Abandons: s.stats.abandons.Load(),
		UnknownDomains: s.stats.unknownDomains.Load(), InvalidStreams: s.stats.invalidStreams.Load(),
		StoreCalls: s.stats.storeCalls.Load(), StoreErrors: s.stats.storeErrors.Load(),
		StoreMisconfigured: s.stats.storeMisconfigured.Load(), ConfigLoads: s.stats.configLoads.Load(),
	}
	s.mu.Lock()
	st.Streams, st.Buckets = len(s.streams), len(s.buckets)
	bs := make([]*bucket, 0, len(s.buckets))
	for _, b := range s.buckets {
		bs = append(bs, b)
	}
	s.mu.Unlock()
	for _, b := range bs {
		b.mu.Lock()
		st.Subscriptions += len(b.subs)
		b.mu.Unlock()
	}
	return st
}
