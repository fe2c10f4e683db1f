"""Workers for training and prediction: which devices they run on, and how they are started."""
