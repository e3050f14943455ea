// Package hashkey is the project's one 64-bit hash: FNV-1a over the
// bytes, then the splitmix64 finalizer. The gateway's affinity keys,
// prefix-block chains and Maglev tables use it, and so do the simulator's
// deterministic draws, so a simulated gateway places a key where a real
// one does.
package hashkey

// FNV-1a's 64-bit offset basis and prime.
const (
	offset64 = 14695981039346656037
	prime64  = 1099511628211
)

// Mix is the splitmix64 finalizer: every bit of x affects every bit of
// the result.
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// String hashes s.
func String(s string) uint64 { return Seeded(s, 0) }

// Seeded hashes s with seed XORed into FNV-1a's offset basis, so one
// string gives independent hashes for different seeds.
func Seeded(s string, seed uint64) uint64 {
	h := uint64(offset64) ^ seed
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime64
	}
	return Mix(h)
}

// Bytes hashes b; Bytes(b) == String(string(b)).
func Bytes(b []byte) uint64 {
	h := uint64(offset64)
	for _, c := range b {
		h ^= uint64(c)
		h *= prime64
	}
	return Mix(h)
}
