package keyspace

// Slot returns the Redis Cluster hash slot of key (CRC16/XMODEM of the hash
// tag, modulo 16384), so that callers can group keys that may share one
// multi-key script call.
func Slot(key string) uint16 {
	if s := hashTag(key); s != "" {
		key = s
	}
	return crc16(key) % 16384
}

func hashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j == i+1 {
					return ""
				}
				return key[i+1 : j]
			}
		}
		return ""
	}
	return ""
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// EpochConfirmed is the confirmation time of slot's loss marker (Epoch):
// the Redis time (ms) at which the slot's data was last seen on the server
// the marker names, so that a marker moved by a slot migration is told
// from a loss (see lease/doc.go). It shares the marker's slot.
func (s Space) EpochConfirmed(slot uint16) string { return s.Epoch(slot) + ":at" }

// EpochTokens is the high-water mark of slot's fencing tokens: the
// greatest token minted for a lease in the slot (decimal), which the next
// token exceeds, so that a session's tokens increase without the
// acquisition writing the session's fencing record (see lease/doc.go). It
// shares the marker's slot.
func (s Space) EpochTokens(slot uint16) string { return s.Epoch(slot) + ":tokens" }
