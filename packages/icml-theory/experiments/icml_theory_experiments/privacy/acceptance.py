"""Print the numbers behind issue 7's acceptance items (soundness, tightness witness, speed).

    uv run python -m icml_theory_experiments.privacy.acceptance

The tests assert the same properties; this script prints the measured margins.
"""

import time

import numpy as np

from icml_theory.privacy import (
    GaussianRDP,
    OptimalRDPAccountant,
    RandomizedResponseRDP,
    SubsampledGaussianRDP,
    bernoulli_renyi,
    gaussian_tradeoff,
    optimal_tradeoff,
)


def both_directions(orders, alpha, beta):
    """max(D_t(Bern(alpha) || Bern(1 - beta)), D_t(Bern(1 - beta) || Bern(alpha))) per order."""
    return np.maximum(bernoulli_renyi(orders, alpha, 1 - beta), bernoulli_renyi(orders, 1 - beta, alpha))


def main() -> None:
    alphas = np.geomspace(1e-12, 1 - 1e-6, 200)
    for mu in (0.5, 1, 2):
        curve = optimal_tradeoff(GaussianRDP(1 / mu), alphas)
        print(f"soundness mu={mu}: max(f - G_mu) = {np.max(curve.beta - gaussian_tradeoff(alphas, mu)):.3e}")

    fine = np.concatenate([np.linspace(0.5, 0.99, 50), np.geomspace(1.0, 1e4, 2000)])
    profiles = [
        ("gaussian mu=1", GaussianRDP(1.0)),
        ("dp-sgd", SubsampledGaussianRDP(0.01, 1.0, 1000)),
        ("rr eps0=1", RandomizedResponseRDP(1.0)),
    ]
    for name, profile in profiles:
        alphas = np.geomspace(1e-8, 0.5, 25)
        curve = optimal_tradeoff(profile, alphas)
        rho = profile(fine)
        pairs = list(zip(alphas, curve.beta, curve.order, strict=True))
        worst = max(np.max(both_directions(fine, a, f) - rho) for a, f, _ in pairs)
        broken = sum(bool(both_directions(t, a, f * (1 - 1e-6)) > profile(t)) for a, f, t in pairs)
        print(
            f"witness {name}: max over alpha and {fine.size} orders of (D - rho) = {worst:.3e}; "
            f"f * (1 - 1e-6) violates at {broken}/{len(pairs)} alphas"
        )

    profile = SubsampledGaussianRDP(0.01, 1.0, 1000)
    alphas = np.geomspace(1e-6, 0.5, 200)
    optimal_tradeoff(profile, alphas[:5])  # warm-up
    times = []
    for _ in range(3):
        start = time.perf_counter()
        optimal_tradeoff(profile, alphas)
        times.append(time.perf_counter() - start)
    print("speed: 200-point DP-SGD curve (1000 steps), s:", [round(x, 3) for x in times])
    accountant = OptimalRDPAccountant().step(noise_multiplier=1.0, sample_rate=0.01, num_steps=1000)
    start = time.perf_counter()
    epsilon = accountant.get_epsilon(1e-5)
    print(f"accountant get_epsilon(1e-5) = {epsilon:.6f} in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
