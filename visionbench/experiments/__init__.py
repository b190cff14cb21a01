"""Stand-alone experiments that train their own small networks (not runs of a sweep), with their figures.

visionbench plot boundaries --acts relu,gelu,rational,hermite --out boundaries.png   # boundaries.py
"""
