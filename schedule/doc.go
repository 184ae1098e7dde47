// Package schedule is the pure part of cron schedules: it parses a session's
// schedule (a cron expression with 5 fields, or 6 with seconds first, or a
// descriptor such as @hourly or @every 90s) in a time zone, with Jenkins-style
// H fields and a jitter picked from the session id, and answers the questions
// a holder asks: which slot comes next, which slots were missed, and, after an
// outage, a pause or a data loss, which one to run now under a catch-up
// policy. It reads no clock and no Redis; every answer is a function of its
// arguments, so every holder of a session, past and future, computes the same
// slots.
//
// Slots. A slot is a wall-clock time in the schedule's zone (UTC by default)
// that the fields match, as an instant. Around a daylight-saving change the
// rule is cron's (Vixie/ISC): a schedule that runs every hour of the day
// ("*/5 * * * *", "0 * * * *") follows the instants, so a skipped hour has no
// slots and a repeated hour has its slots twice (they are an hour apart); a
// schedule with fixed hours ("30 2 * * *", "0 */6 * * *") runs each wall time
// once: in a repeated hour at its first occurrence only, and a wall time in a
// skipped hour at the first instant after the change (02:30 in Berlin on the
// last Sunday of March runs at 03:00 CEST). @every d has slots at the
// multiples of d since the Unix epoch, whatever the zone.
//
// H. In a field, H means a value picked by a hash of the session id (and of
// the field), so that many sessions "H * * * *" spread over the hour: H (the
// field's whole range; 1-28 for the day of month), H(a-b) (a value in a..b),
// H/n (every n, starting at a hashed offset below n) and H(a-b)/n. The
// descriptors keep their usual meaning (@hourly is "0 * * * *").
//
// Jitter. A session's slots start at slot + an offset in [0, jitter), the same
// for every slot of the session and picked by a hash of its id. The slot time
// itself (what X-Poll-Slot carries) does not move.
//
// Non-guarantees: the package decides, it does not run anything; that a slot
// runs once across a fleet is the holder's job (leases, fenced state).
package schedule
