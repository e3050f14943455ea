package process

import "time"

// Defaults of the window settings. The single processor, the partitioned
// instances and the combiner must run with the same values, so their
// commands take these defaults from here.
const (
	DefaultGroup           = "switchyard-processor"
	DefaultWindow          = 30 * time.Second
	DefaultSlide           = 10 * time.Second
	DefaultAllowedLateness = 5 * time.Second
)
