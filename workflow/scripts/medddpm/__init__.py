"""The Med-DDPM workload: 3D U-Net, mask-conditioned DDPM, data loading, training and sampling loops."""
