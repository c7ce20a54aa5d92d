"""VCR-Bench's judge prompts, as zhishuifeiqian/VCR-Bench ``eval_code/prompt.py`` defines them.

They are the official answer extraction (the LLM reads the final answer out of a response) and
answer scoring (the LLM says 1 or 0 for extracted vs. reference answer): the official accuracy
is defined by these words, so they are reproduced unchanged (trailing spaces aside). Used by
:mod:`easyvideor1.eval.benchmarks.vcrbench`.
"""

# ruff: noqa: E501

EXTRACTION_RULES = r"""You are an AI assistant who will help me to extract an answer of a question. You are provided with a question and a response, and you need to find the final answer of the question.

Extract Rule:
[Multiple choice question]
1. The answer could be answering the option letter or the value. You should directly output the choice letter of the answer.
2. You should output a single uppercase character in A, B, C, D, E, F, G, H, I (if they are valid options), and Z.
3. If the meaning of all options are significantly different from the final answer, output Z.
[Non Multiple choice question]
1. Output the final value of the answer. It could be hidden inside the last step of calculation or inference. Pay attention to what the question is asking for to extract the value of the answer.
2. The final answer could also be a short phrase or sentence.
3. If the answer is about a certain time period, such as from 1 minute 30 seconds to 2 minutes 30 seconds, it should be given in the format [90, 150].
4. If the response doesn't give a final answer, output Z.

Output Format:
Directly output the extracted answer of the response

Example 1:
Question: What is the main object in image?
Options: A. teddy bear B. rabbit C. cat D. dog
Response: a cute teddy bear
Your output: A
Example 2:
Question: What is the main object in image?
Options: A. teddy bear B. rabbit C. cat D. dog
Answer: Spider
Your output: Z
Example 3:
Question: On a flat playground, choose a Cartesian Oxy coordinate system (in unit of meters). A child running at a constant velocity $V=1 \mathrm{~m} / \mathrm{s}$ around a heart-shaped path satisfies the following order- 6 algebraic equation:
$$
\left(x^{2}+y^{2}-L^{2}\right)^{3}-L x^{2} y^{3}=0, L=10 \text {. }
$$
When the child is at the position $(x, y)=(L, 0)$, what is the magnitude of their acceleration?

<image>
Response: fore, \(r \approx 10 \, \text{m}\).

7. **Calculating Acceleration**: Using the radius of curvature:
   \[
   a_c = \frac{V^2}{r} = \frac{(1 \, \text{m/s})^2}{10 \, \text{m}} = 0.1 \, \text{m/s}^2
   \]

8. **Magnitude of Acceleration**: The magnitude of the acceleration is the sum of the tangential and centripetal accelerations. Since the tangential acceleration is zero, the magnitude of the acceleration is purely centripetal:
   \[
   \text{Magnitude of acceleration} = a_c = 0.1 \, \text{m/s}^2
   \]

Answer: \boxed{0.1 \, \text{m/s}^2}
Your output: 0.1 text{m/s}^2
Example 4:
Question: In the diagram, $O A=15, O P=9$ and $P B=4$. Determine the equation of the line through $A$ and $B$. Explain how you got your answer.

<image>
Response: The equation of the line through $A$ and $B$ is $y = -rac{1}{3}x + 12$.

To find the equation of the line through $A$ and $B$, we first need to find the slope of the line. The slope of a line passing through two points $(x_1, y_1)$ and $(x_2, y_2)$ is given by the formula:

$$	ext{Slope} = rac{y_2 - y_1}{x_2 - x_1}$$

Using the coordinates of points $A(0, 15)$ and $B(4, 0)$, we can calculate the slope as follows:

$$	ext{Slope} = rac{0 - 15}{4 - 0} = rac{-15}{4} = -rac{15}{4}$$

Now that we have the slope, we can use the point-slope form of a linear equation to find the equation of the line. The point-slope form is given by:

$$y - y_1 = m(x - x_1)$$

where $(x_1, y_1)$ is a point on the line and $m$ is the slope. In this case, we can use point $A(0, 15)$ and the slope $-rac{15}{4}$:

$$y - 15 = -rac{15}{4}(x - 0)$$

Simplifying the equation, we get:

$$y - 15 = -rac{15}{4}x$$

$$y = -rac{15}{4}x + 15$$

Therefore, the equation of the line through $A$ and $B$ is $y = -rac{15}{4}x + 15$.
Your output: $y = -rac{15}{4}x + 15$
Example 5:
Question: <image> <image> <image> <image> <image> <image> <image> <image> <image>In the paper 'An Object is Worth 64x64 Pixels: Generating 3D Object via Image Diffusion', what aspect of the proposed method does this figure aim to demonstrate?
Response: the potential of this 3D generation paradigm to generate objects with PBR materials
Your output: the potential of this 3D generation paradigm to generate objects with PBR materials
Example 6:
Question: Please specify the start and end time of the event 'An intro screen appears with a gray background and the red and white words that say PRO TRAINING.'
Response: The start and end time of the event 'An intro screen appears with a gray background and the red and white words that say PRO TRAINING.' are as follows:

**Step 1: Identify the start time of the event.**
The video starts at 00:00. The intro screen is visible from the very beginning.

**Start time:** 00:00

**Step 2: Identify the end time of the event.**
The intro screen starts to disappear and transition to the next scene at 00:11. By 00:12, the intro screen is completely gone. So, the intro screen is visible until 00:11.

**End time:** 00:11

Therefore, the event 'An intro screen appears with a gray background and the red and white words that say PRO TRAINING' starts at **00:00** and ends at **00:11**.

**Answer:**
Start time: 00:00
End time: 00:11
Your output: [0,11]

"""

EXTRACTION_QUERY = r"""
Question: {question}
Answer: {response}
Your output:
"""

SCORING_RULES = r"""You are an AI assistant who will help me to judge whether two answers are consistent.

Input Illustration:
[Standard Answer] is the standard answer to the question
[Model Answer] is the answer extracted from a model's output to this question.

Task Illustration:
Determine whether [Standard Answer] and [Model Answer] are consistent.
Consistent Criteria:
[Multiple-Choice questions]
1. If the [Model Answer] is the option letter, then it must completely matches the [Standard Answer].
2. If the [Model Answer] is not an option letter, then the [Model Answer] must completely match the option content of [Standard Answer].
[Nan-Multiple-Choice questions]
1. The [Model Answer] and [Standard Answer] should exactly match.
2. If the meaning is expressed in the same way, it is also considered consistent, for example, 0.5m and 50cm.

Output Format:
1. If they are consistent, output 1; if they are different, output 0.
2. DIRECTLY output 1 or 0 without any other content.

Example 1:
Question: What is the main object in image?\nOptions: A. teddy bear B. rabbit C. cat D. dog
[Model Answer]: a cute teddy bear
[Standard Answer]: A
Your output: 1

Example 2:
Question: Find the value of AB. Choices: A.1;B.5;C.9;D.10
[Model Answer]: \\boxed{5}
[Standard Answer]: B
Your output: 1

Example 3:
Question: Three of the following four slides are from the same presentation, but one is from a different one. Please identify the outlier: \n\n<image> <image> <image> <image>\nA. the forth image\nB. the second image\nC. the third image\nD. None of the choices provided
[Model Answer]: \\boxed{B}
[Standard Answer]: A
Your output: 0


"""

SCORING_QUERY = r"""
Question: {question}
[Model Answer]: {extract_answer}
[Standard Answer]: {gt_answer}
Your output:
"""
