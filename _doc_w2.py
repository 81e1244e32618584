from verl import DPOTrainer
pairs = [{"prompt": "What is 2+2?", "chosen": "4", "rejected": "5"}, {"prompt": "Capital of France?", "chosen": "Paris", "rejected": "Rome"}]
trainer = DPOTrainer(model="smollm2-135m-instruct", dataset=pairs, beta=0.1, max_length=128)
metrics = trainer.train(num_train_epochs=1, per_device_train_batch_size=2, learning_rate=1e-6, output_dir="/tmp/w2_dpo_demo")
print(metrics["loss"], metrics["rewards/margins"], metrics["rewards/accuracies"])
