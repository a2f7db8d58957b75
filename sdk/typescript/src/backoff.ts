// The delay between connection attempts: exponential with jitter, each drawn
// from the upper half of the current step so that instances do not
// reconnect in lockstep (docs/protocol.md, reconnect.backoff).

export class Backoff {
  private step = 0;

  constructor(
    private readonly min: number,
    private readonly max: number,
    private readonly random: () => number = Math.random,
  ) {}

  /** Starts again from the smallest step (after a Welcome). */
  reset(): void {
    this.step = 0;
  }

  /** The next delay, in milliseconds. */
  next(): number {
    if (this.step === 0) this.step = this.min;
    else if (this.step < this.max / 2) this.step *= 2;
    else this.step = this.max;
    const half = this.step / 2;
    return Math.round(half + this.random() * (this.step - half));
  }
}
