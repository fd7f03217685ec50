// Package shape moves bytes at a limited rate: it wraps an io.Reader,
// io.Writer, net.Conn or net.Listener so that the data going through it is
// paid for, chunk by chunk, to a rate limiter (any ratelimit.Acquirer: the
// local Limiter, or a distributed one sharing a budget between processes).
// A permit is one byte, so a limiter at 1e6 permits per second shapes a
// stream to 1 MB/s.
//
// Three choices make the output smooth rather than merely correct on
// average (docs/shaping.md has the reasoning and a plot):
//
//   - Writes pay before they go out. Each chunk is acquired, then written,
//     so no byte leaves before its permit, whatever the caller's buffer size.
//   - Reads are trimmed before they happen, and paid before. A Read never
//     asks the source for more bytes than it has paid for, so one large read
//     cannot slip through ahead of its bill.
//   - Data moves in chunks: ChunkSize(rate), about 10 ms of data clamped to
//     [MinChunkSize, MaxChunkSize], unless WithChunkSize fixes it. A 1 MiB
//     Write at 1 MB/s leaves as 100 chunks 10 ms apart, not as one burst. The
//     size follows the limiter's current rate, so SetRate while data flows
//     takes effect at the next chunk.
//
// The limiter decides how bursty the stream may be. A ratelimit.Limiter
// follows Guava's pay-later model: a chunk waits only for the debt of the
// chunks before it, so the first chunk after an idle period goes at once,
// and a bursty limiter lets up to maxBurstSeconds of saved-up bytes through
// at line rate. Keep that burst small (WithMaxBurstSeconds(0.1), say) to
// bound what an idle stream may later blast, but not zero: the stored
// permits are also what makes up for timer oversleep, and without them the
// stream falls short of its rate.
//
// A limiter whose rate is +Inf is free: the wrappers then pass data through
// untouched, in one call. A nil limiter means the same.
//
// Typical use:
//
//	lim, _ := ratelimit.NewBursty(1e6, ratelimit.WithMaxBurstSeconds(0.1)) // 1 MB/s
//	w, _ := shape.NewWriter(os.Stdout, lim)
//	io.Copy(w, src)
//
// The units of the command line ("500k", "1MiB/s", "2Gbit") are parsed by
// ParseRate and ParseSize.
//
// # Options
//
// The module's one convention: a nil option, an option with an invalid
// value and one that does not apply to the constructor (WithContext to
// NewConn or NewListener, whose connections have deadlines) are errors
// returned by the constructor, wrapping ErrInvalidOption.
package shape
